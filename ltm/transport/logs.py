"""Structured logs: one JSON object per line on stderr, shared by every actor process."""
from __future__ import annotations

import json
import logging
import sys
import time

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """``{"ts": …, "level": …, "actor": …, "msg": …, <extra fields>}``."""

    def __init__(self, actor: str) -> None:
        super().__init__()
        self.actor = actor

    def format(self, record: logging.LogRecord) -> str:
        """The record as one JSON line: time, level, actor, logger, message, the ``extra`` fields and
        any traceback.
        """
        out = {"ts": round(time.time(), 3), "level": record.levelname.lower(), "actor": self.actor,
               "logger": record.name, "msg": record.getMessage()}
        out.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(actor: str, level: str = "info") -> None:
    """Route every logger to stderr as JSON lines tagged with the actor's name."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(actor))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

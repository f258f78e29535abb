"""Actor configuration: a TOML file whose keys mirror the command-line flags; flags win.

The flags themselves (and ``--config``) are declared in :mod:`ltm.cli.options`; this module reads the
file and merges it into the parsed flags.
"""
from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any

from ltm.errors import LtmError


class ConfigError(LtmError, ValueError):
    """A configuration file that cannot be used; the message names the file and key."""

    exit_code = 2


def load_config(path: str | None) -> dict[str, Any]:
    """Read a TOML config file (None → empty).  Keys use underscores (``data_dir``)."""
    if path is None:
        return {}
    p = Path(path)
    try:
        with p.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {p}: {exc}") from None


def merge(args: argparse.Namespace, config: dict[str, Any], required: tuple[str, ...] = ()) -> argparse.Namespace:
    """Fill flags left unset (None) from the config; refuse unknown keys and missing required ones."""
    known = set(vars(args))
    unknown = sorted(set(config) - known)
    if unknown:
        raise ConfigError(f"unknown config keys {unknown}; valid keys: {sorted(known - {'func', 'command'})}")
    for key, value in config.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    missing = [k for k in required if getattr(args, k) in (None, "")]
    if missing:
        raise ConfigError(f"missing settings {missing}: give them as --{missing[0].replace('_', '-')} or in the config file")
    return args

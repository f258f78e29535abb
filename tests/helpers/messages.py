"""Matching error messages exactly."""
from __future__ import annotations

import re


def exact(message: str) -> str:
    """A ``pytest.raises(match=...)`` pattern that matches ``message`` and nothing longer."""
    return "^" + re.escape(message) + "$"

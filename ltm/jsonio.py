"""JSON output of reports that may hold numpy values."""
from __future__ import annotations

from typing import Any


def json_default(obj: Any) -> Any:
    """``json.dumps(default=…)`` for numpy scalars and arrays; anything else is a TypeError."""
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")

"""Deterministic seeds for experiment cells (simulation only: these seeds make runs NOT private)."""
from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np


def canonical(obj: Any) -> str:
    """Canonical JSON (sorted keys, no whitespace) of a params dict."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from SHA-256 of the parts (stable across Python/numpy versions)."""
    h = hashlib.sha256()
    for p in parts:
        text = p if isinstance(p, str) else canonical(p)
        h.update(len(text).to_bytes(8, "little"))
        h.update(text.encode())
    return int.from_bytes(h.digest()[:8], "little") >> 1


def subseed(seed: int, *labels: Any) -> int:
    """A child seed of ``seed`` for a labelled purpose (e.g. ``subseed(seed, "data")``)."""
    return derive_seed(int(seed), *labels)


def numpy_rng(seed: int, *labels: Any) -> np.random.Generator:
    """A numpy Generator for simulation baselines, derived from ``seed`` and labels."""
    return np.random.default_rng(subseed(seed, *labels) if labels else int(seed))

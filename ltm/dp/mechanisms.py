"""The noise mechanisms and calibration modes a job may name, as string-valued enums.

String-valued (:class:`enum.StrEnum`) so that job files, canonical job JSON and reports keep the
plain strings ``"gaussian"``, ``"tight"``, … and comparisons with those strings still hold.
"""
from __future__ import annotations

import enum


class Mechanism(enum.StrEnum):
    """The release's noise: (ε, δ) via the distributed discrete Gaussian, or pure ε via the discrete Laplace."""

    GAUSSIAN = "gaussian"
    LAPLACE = "laplace"


class Calibration(enum.StrEnum):
    """How the noise is calibrated (docs/architecture.md, "Noise calibration")."""

    TIGHT = "tight"
    PAPER = "paper"
    INTERPOLATE = "interpolate"


#: The values as plain strings, in declaration order (for messages and argparse choices).
MECHANISMS: tuple[str, ...] = tuple(m.value for m in Mechanism)
CALIBRATIONS: tuple[str, ...] = tuple(c.value for c in Calibration)

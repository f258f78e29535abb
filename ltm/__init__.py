"""LTM: distributed differential privacy by secure sketching (the linear-transformation model).

The ``ltm`` package is the pure protocol core shared by every actor: job spec and digest,
fixed-point ring arithmetic, additive sharing, the public seeded sketch, noise samplers and privacy
calibration.  It does no network or disk I/O; ``ltm.cli`` is the one module that imports actors.
"""
__version__ = "0.1.0"

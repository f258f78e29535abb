"""LTM: distributed differential privacy by secure sketching (the linear-transformation model).

The ``ltm`` package is the pure protocol core shared by every actor: job spec and digest,
fixed-point ring arithmetic, additive sharing, the public seeded sketch, noise samplers and privacy
calibration.  It does no network or disk I/O and imports nothing above it: no actor, no simulator, no command
line (``ltm/cli/``, which imports the core; ``tests/unit/ltm/test_core_imports.py`` checks it).
"""
__version__ = "0.1.0"

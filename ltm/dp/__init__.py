"""The privacy arithmetic of LTM in one place (issue #20): mechanisms and calibrations (enums), every
sensitivity and privacy default, the grid and its rounding, the exact integer noise samplers and the
accounting of a job's release.

Nothing outside this package computes a sensitivity (``tests/unit/ltm/dp/test_dp_sensitivity.py`` greps the
source tree for one).  Import from the modules themselves (``ltm.dp.sensitivity``,
``ltm.dp.defaults``, ``ltm.dp.noise``, …): this package re-exports nothing.
"""

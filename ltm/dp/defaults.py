"""The privacy defaults of a job, each defined once (issue #20, item 5).

Production defaults live here, in the core, and every caller imports them: the job spec
(:mod:`ltm.jobspec`), the planner (:mod:`ltm.planner`), the command line and the simulator
(:mod:`ltm.sim.runtime.jobs` imports the clip default from here, never the other way round).
"""
from __future__ import annotations

__all__ = ["DEFAULT_CLIP_BOUND", "DEFAULT_DELTA", "DEFAULT_LOAD_FRACTION"]

#: C, the ℓ2 (Gaussian) or ℓ1 (Laplace) norm every client vector is clipped to.  The public column
#: transforms (``ltm.datasets.tables.public_columns``) scale the columns so that E‖z‖² ≈ C², so 1 is the unit
#: ball the sensitivities of :mod:`ltm.dp.sensitivity` are stated for.
DEFAULT_CLIP_BOUND = 1.0

#: δ of a Gaussian job unless the analyst says otherwise (well below 1/n for every n the limits
#: allow up to 10⁶ clients; a pure-ε Laplace job records 0).
DEFAULT_DELTA = 1e-6

#: The fraction of the full-participation honest load that the minimum honest load L keeps
#: (``ltm.jobspec.resolve_defaults``; the planner predicts the noise with the same L): up to ~5 %
#: of a row's clients may drop out before the gate refuses the release.  Each client's noise is
#: σ_Y/√L, so a smaller fraction buys dropout tolerance with proportionally more noise.
DEFAULT_LOAD_FRACTION = 0.95

"""Measurement tools: timings, load and empirical privacy, printed as figures or JSON, never asserted.

``ltm bench`` (:mod:`ltm.sim.tools.bench`, :mod:`ltm.sim.tools.bench_e2e`), ``ltm loadtest``
(:mod:`ltm.sim.tools.loadtest`), ``ltm audit`` (:mod:`ltm.sim.tools.audit`) and the bounds evaluation
(:mod:`ltm.sim.tools.bounds_eval`).
"""

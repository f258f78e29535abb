"""Measurement tools: timings, load and empirical privacy, printed as figures or JSON, never asserted.

``ltm bench`` (:mod:`sim.tools.bench`, :mod:`sim.tools.bench_e2e`), ``ltm loadtest``
(:mod:`sim.tools.loadtest`), ``ltm audit`` (:mod:`sim.tools.audit`) and the bounds evaluation
(:mod:`sim.tools.bounds_eval`).
"""

"""The simulator, in three rooms by purpose.

* :mod:`ltm.sim.runtime`: the in-process runtime: party, server and analyst cores wired together in one
  process (``ltm simulate``, replicated runs, job building, the printed summary).
* :mod:`ltm.sim.localnet`: the local network: real ``ltm`` processes on loopback or in network
  namespaces (process groups, ``ltm demo``/``ltm operate``, chaos).
* :mod:`ltm.sim.tools`: measurement tools (``ltm bench``, ``ltm loadtest``, ``ltm audit``, the bounds
  evaluation).

Its data (tables, synthetic generators, bundled datasets) is the separate package
:mod:`ltm.datasets`; its production defaults live in the core (:mod:`ltm.dp.defaults`,
:mod:`ltm.planner`).
"""

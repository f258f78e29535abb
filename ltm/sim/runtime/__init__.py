"""The in-process runtime: party, server and analyst cores wired together in one process.

``ltm simulate`` (:mod:`ltm.sim.runtime.simulate`), the in-process runs behind it and the experiments
(:mod:`ltm.sim.runtime.inprocess`, :mod:`ltm.sim.runtime.replicated_run`), job building for a table
(:mod:`ltm.sim.runtime.jobs`) and the plain-language run summaries (:mod:`ltm.sim.runtime.summary`).  With
the same seeds a run here releases the same bytes as the networked actors.
"""

"""The local network: real ``ltm`` processes on this host, on loopback or in network namespaces.

The process launcher (:mod:`ltm.sim.localnet.launcher`), network namespaces for tests and testbeds
(:mod:`ltm.sim.localnet.netns`), ``ltm demo`` and ``ltm operate`` (:mod:`ltm.sim.localnet.demo`) and the
fault injection of ``ltm demo --chaos`` (:mod:`ltm.sim.localnet.chaos`).
"""

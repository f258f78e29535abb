"""The local network: real ``ltm`` processes on this host, on loopback or in network namespaces.

The process launcher (:mod:`sim.localnet.launcher`), network namespaces for tests and testbeds
(:mod:`sim.localnet.netns`), ``ltm demo`` and ``ltm operate`` (:mod:`sim.localnet.demo`) and the
fault injection of ``ltm demo --chaos`` (:mod:`sim.localnet.chaos`).
"""

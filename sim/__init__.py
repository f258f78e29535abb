"""The simulation framework: the in-process transport wiring party, server and analyst cores in one
process, data loading and synthetic generators, and the ``ltm simulate`` / ``ltm bench`` drivers."""

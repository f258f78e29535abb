"""Validity proofs for secret-shared uploads: a fully linear proof (FLP, Boneh et al. 2019) that a
client's rounded vector has every entry in range and its squared L2 norm within a bound.

Pure core (no I/O): :mod:`ltm.flp.field` (prime fields vectorised in numpy), :mod:`ltm.flp.ntt`
(number-theoretic transforms over many clients at once), :mod:`ltm.flp.circuit` (the encoding and
the validity circuit), :mod:`ltm.flp.proof` (prove / query / decide) and :mod:`ltm.flp.shares`
(seed-compressed input and proof shares).  docs/architecture.md, "Validity proofs (FLP)", gives
the construction, the soundness bound and the zero-knowledge argument.
"""

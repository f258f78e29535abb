"""A party's side of the replicated degree-2 release (ltm/replicated.py; docs/architecture.md).

The party forms its block of the client vectors exactly as for a sketch job (public transforms,
then clipping to its budget share C_j), rounds it to the grid 2^-f, replicate-shares it to the
three servers and sends each server an additive share of its integer noise (one value per released
entry, on the product grid 2^-2f).  Which additive share travels explicitly (the others as seeds)
rotates with the party's position, so the servers' download is balanced.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ltm.clipping import clip_rows
from ltm.jobspec import JobSpec
from ltm.randomness import Randomness
from ltm.replicated import BlockUpload, party_uploads
from party.randomizer import client_vectors


def replicated_uploads(spec: JobSpec, party_id: str, table: Mapping[str, np.ndarray],
                       randomness: Randomness, *, noise: bool = True) -> list[BlockUpload]:
    """The party's three uploads (server order).  ``noise=False``: exactness checks only."""
    if not spec.replicated:
        raise ValueError(f"job {spec.job_id!r} is not a replicated release")
    party = spec.party(party_id)
    index = [p.party_id for p in spec.parties].index(party_id)
    block = clip_rows(client_vectors(spec, party, table), party.clip_bound, spec.clip_norm)
    return party_uploads(block, tuple(spec.party_column_indices(party)), width=spec.width,
                         frac_bits=spec.frac_bits, plan=spec.noise_plan() if noise else None,
                         randomness=randomness, mode=spec.share_mode, primary=index % 3)

"""The verification round's pure steps, one implementation for the in-process and gRPC paths.

* :func:`batch_context` — what a batch's helper shares are bound to (job digest, party, batch,
  first client): a party and every server derive the same bytes.
* :func:`server_verifier_share` — what server j computes for one batch from what it holds: the
  leader from its full shares, a helper from its seed (expanded under the batch's context).
* :func:`invalid_clients` — the analyst's decision for a batch, as the set of its clients whose
  proofs fail, over the job's n clients.
* :func:`drop_invalid` — the participant set without the invalid clients (issue #31 §2: an invalid
  client leaves the set before the gate's coverage and honest-load checks).

The query randomness is an input (a :class:`~ltm.flp.proof.QueryPlan` built from the seed the
servers draw after Close), so this module does not care how that seed travels.
"""
from __future__ import annotations

import numpy as np

from ltm.client_set import ClientSet
from ltm.flp.field import FieldError
from ltm.flp.proof import QueryPlan, combine, decide, query
from ltm.flp.shares import expand_helper


def batch_context(job_digest: str, party_id: str, batch_index: int, start: int) -> bytes:
    """The bytes a batch's helper shares are bound to (length-prefixed, so no two tuples collide)."""
    parts = [b"ltm/flp/batch/v1", job_digest.encode(), party_id.encode(), str(int(batch_index)).encode(),
             str(int(start)).encode()]
    return b"".join(len(p).to_bytes(4, "little") + p for p in parts)


def server_verifier_share(plan: QueryPlan, server: int, clients: int, context: bytes, *,
                          leader: tuple[np.ndarray, np.ndarray] | None = None,
                          seed: bytes | None = None) -> np.ndarray:
    """Server ``server``'s verifier shares (C, 4R) for a batch of ``clients``: server 0 passes its
    ``leader`` shares (bits (C, L), proofs (C, Π)), server j ≥ 1 its 32-byte ``seed``."""
    if not 0 <= server < plan.num_shares:
        raise FieldError(f"server {server} is not one of the plan's {plan.num_shares} servers")
    if server == 0:
        if leader is None or seed is not None:
            raise FieldError("the leader (server 0) verifies its full shares, not a seed")
        meas, proof = leader
        if len(meas) != clients:
            raise FieldError(f"leader shares of {len(meas)} clients for a batch of {clients}")
        return query(plan, meas, proof)
    if seed is None or leader is not None:
        raise FieldError(f"helper {server} verifies the expansion of its seed, not full shares")
    return query(plan, *expand_helper(plan.circuit, seed, context, clients, server))


def invalid_clients(plan: QueryPlan, n: int, start: int, verifier_shares: list[np.ndarray]) -> ClientSet:
    """The clients ``start + i`` of a batch whose proofs fail, as a set over the job's ``n`` clients,
    from every server's verifier shares (one (C, 4R) array per server, in server order)."""
    if len(verifier_shares) != plan.num_shares:
        raise FieldError(f"{len(verifier_shares)} verifier shares for {plan.num_shares} servers")
    ok = decide(plan.circuit, combine(plan.circuit, verifier_shares))
    if start < 0 or start + len(ok) > n:
        raise FieldError(f"batch [{start}, {start + len(ok)}) is outside the job's {n} clients")
    mask = np.zeros(n, dtype=bool)
    mask[start:start + len(ok)] = ~ok
    return ClientSet.from_mask(mask)


def drop_invalid(participants: ClientSet, invalid: list[ClientSet]) -> tuple[ClientSet, ClientSet]:
    """``(participants without the invalid clients, the invalid clients among the participants)``."""
    bad = ClientSet.union(invalid) if invalid else ClientSet.empty(participants.n)
    dropped = participants & bad
    return participants - dropped, dropped

"""The release gate (docs/architecture.md §5): every server checks it on its own before returning a result share.

No server trusts the analyst.  A malicious analyst could ask for a release over one client (and
read that client's data under almost no noise) or ask twice and difference the releases.  So the
server refuses unless:

1. the caller is the analyst and names this job's digest;
2. the job has not been released before (the record is persisted and survives restarts);
3. the participant set is a subset of the clients this server actually holds;
4. the set has at least ``min_participants`` clients, and every sketch row keeps an honest load
   ``load_r − deduction_r ≥ L`` (deduction: t′ corrupt clients, or the largest load that the
   tolerated number of corrupt parties hold together in that row);
5. in an ``aggregate`` job, the set holds each party's clients all or none (an aggregate cannot be
   split; docs/architecture.md, "Aggregated uploads").

Pure: the gRPC servicer maps :class:`GateRefusal` codes to gRPC status codes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ltm.client_set import ClientSet
from ltm.errors import ProtocolError
from ltm.jobspec import JobSpec, honest_row_loads
from ltm.sketch import Sketch

ANALYST_ROLE = "analyst"


class GateRefusal(ProtocolError):
    """A refused release.  ``code`` is a gRPC status name (PERMISSION_DENIED, FAILED_PRECONDITION…)."""


@dataclass(frozen=True)
class GateDecision:
    """An allowed release: the participant count and the honest load it was checked against."""

    participants: int
    min_honest_load: int
    min_row_load: int


def _client_set(spec: JobSpec, members: ClientSet | np.ndarray, what: str) -> ClientSet:
    """A ClientSet over the job's n from a ClientSet or a 0/1 mask (n,) (tests pass masks)."""
    if isinstance(members, ClientSet):
        if members.n != spec.n:
            raise GateRefusal("INVALID_ARGUMENT", f"{what} set is over n = {members.n} clients, expected {spec.n}")
        return members
    mask = np.asarray(members)
    if mask.shape != (spec.n,):
        raise GateRefusal("INVALID_ARGUMENT", f"{what} mask has shape {mask.shape}, expected ({spec.n},)")
    return ClientSet.from_mask(mask.astype(bool))


def check_release_request(spec: JobSpec, *, caller_role: str, job_digest: str, already_released: bool) -> None:
    """The checks every release request passes first, whatever the release kind: only the analyst,
    for this job's digest, and only once (a second release would let differencing cancel the noise).
    Raises :class:`GateRefusal`."""
    if caller_role != ANALYST_ROLE:
        raise GateRefusal("PERMISSION_DENIED", f"only the analyst may request a release (caller role {caller_role!r})")
    if job_digest != spec.digest:
        raise GateRefusal("FAILED_PRECONDITION", "the job digest in the request does not match this job's spec")
    if already_released:
        raise GateRefusal("FAILED_PRECONDITION", f"job {spec.job_id!r} has already been released once; "
                                                 "a second release would let differencing cancel the noise")


def check_release(spec: JobSpec, *, caller_role: str, job_digest: str, participants: ClientSet | np.ndarray,
                  held: ClientSet | np.ndarray, already_released: bool, sketch: Sketch | None = None,
                  slots: np.ndarray | None = None) -> GateDecision:
    """Allow or refuse a release; raises :class:`GateRefusal` on refusal.

    Args:
        participants: the agreed participant set (a ClientSet, or a bool mask (n,)).
        held: the clients whose complete vectors this server holds (ClientSet or bool mask (n,)).
        slots: the job's cached :meth:`Sketch.slots`, if the server keeps one (small jobs); the
            row loads are otherwise derived chunk by chunk (:func:`honest_row_loads`).
    """
    check_release_request(spec, caller_role=caller_role, job_digest=job_digest, already_released=already_released)
    participants = _client_set(spec, participants, "participant")
    held = _client_set(spec, held, "held")
    extra = participants - held
    if extra:
        raise GateRefusal("FAILED_PRECONDITION", f"the participant set contains {extra.count} clients this server "
                                                 f"does not hold (first: {extra.first()})")
    if spec.aggregated:
        # Each stored batch is a whole party's aggregate: a set holding only some of a party's clients
        # cannot be served (and must not be approximated by the whole aggregate).
        for party in spec.parties:
            if participants.intersects(party.start, party.stop) and not participants.covers(party.start, party.stop):
                raise GateRefusal("FAILED_PRECONDITION",
                                  f"party {party.party_id!r} uploaded one aggregate of clients [{party.start}, "
                                  f"{party.stop}); a participant set must hold all of them or none")
    count = participants.count
    if count < spec.privacy.min_participants:
        raise GateRefusal("FAILED_PRECONDITION", f"participant set of {count} clients is below the job's minimum of "
                                                 f"{spec.privacy.min_participants}")
    loads, deduction = honest_row_loads(spec, participants, sketch, slots)
    honest = loads - deduction
    worst = int(honest.min())
    if worst < spec.privacy.min_honest_load:
        raise GateRefusal("FAILED_PRECONDITION",
                          f"sketch row {int(np.argmin(honest))} would carry an honest load of {worst} < the promised "
                          f"L={spec.privacy.min_honest_load}: too few participants for the noise the parties added")
    return GateDecision(participants=count, min_honest_load=worst, min_row_load=int(loads.min()))

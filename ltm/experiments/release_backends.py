"""How an experiment cell gets a release: in process (default) or through the real gRPC actors.

Scenario code calls ``current().release(spec, party_data, seed)`` and does not care which; the
runner installs :class:`NetworkedBackend` for ``ltm experiment run --networked``.

* :class:`InProcessBackend` runs :func:`ltm.sim.runtime.inprocess.run_inprocess` — the same party, server
  and analyst cores as ``ltm simulate``.
* :class:`NetworkedBackend` starts, once per run, k ``ltm server`` processes and an
  ``ltm analyst`` process on loopback with mutual TLS (``ltm.sim.localnet.launcher``, as ``ltm demo``), and for
  every job writes each party's rows to a CSV, submits the job to the analyst, starts one
  ``ltm party`` process per party, lets the analyst close/release/reconstruct, and fetches the
  release.  Parties get ``--seed`` so that, for the same seed, the released sketch is
  bit-identical to the in-process one (the tests check it).

Both use SEEDED randomness (``Randomness.seeded_insecure``): experiment runs are reproducible and
NOT private.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ltm.analyst.release import ReleasedSketch, release_from_reply
from ltm.errors import LtmError
from ltm.jobspec import JobSpec
from ltm.randomness import Randomness

_CURRENT: "ReleaseBackend | None" = None


class NetworkedJobFailed(LtmError, RuntimeError):
    """A networked experiment job whose party processes failed (their log tails in the message)."""

    exit_code = 2  # what `ltm experiment run` exits with


class ReleaseBackend:
    """Interface: ``endpoints(k)`` for the job spec, ``release(...)`` to run a job, ``close()``."""

    name = "abstract"

    def endpoints(self, k: int) -> list[str] | None:
        return None

    def release(self, spec: JobSpec, party_data: Mapping[str, Mapping[str, np.ndarray]], seed: int) -> ReleasedSketch:
        raise NotImplementedError

    def close(self) -> None:
        pass


class InProcessBackend(ReleaseBackend):
    name = "inprocess"

    def release(self, spec, party_data, seed):
        from ltm.party.ledger import UNLIMITED
        from ltm.sim.runtime.inprocess import run_inprocess

        # Each run of a sweep is a world of its own: the parties' ledgers charge and report the
        # job, but no cumulative budget applies to reproductions of the papers' figures.
        return run_inprocess(spec, party_data, Randomness.seeded_insecure(seed), budget=UNLIMITED).release


class NetworkedBackend(ReleaseBackend):
    """Real processes on loopback (mutual TLS).  Started lazily on the first job; ``close`` stops them."""

    name = "networked"

    def __init__(self, k: int = 3, workdir: str | Path | None = None, deadline_s: float = 120.0) -> None:
        self.k = k
        self.deadline_s = deadline_s
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else None
        self.group = None
        self.servers: list = []
        self.analyst = None
        self.certs: Path | None = None
        self._jobs = 0

    # ------------------------------------------------------------------ lifecycle
    def _start(self) -> None:
        if self.group is not None:
            return
        from ltm.sim.localnet.launcher import ProcessGroup
        from ltm.transport.certs import write_certs

        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="ltm-experiment-net-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.certs = self.workdir / "certs"
        self._party_ids = [f"party-{i}" for i in range(16)]
        write_certs(self.certs, [f"server-{i}" for i in range(self.k)] + self._party_ids + ["analyst", "operator"],
                    force=True)
        self.group = ProcessGroup(self.workdir, self.certs)
        try:
            self.servers = self.group.start_servers(self.k)
            self.analyst = self.group.start_service("analyst", "analyst",
                                                    ["analyst", "--out", str(self.workdir / "analyst-out")])
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.group is not None:
            self.group.stop_all()
            self.group = None
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    # ------------------------------------------------------------------ jobs
    def endpoints(self, k: int) -> list[str]:
        self._start()
        if k != self.k:
            raise ValueError(f"this networked deployment has {self.k} servers; the job wants k={k}")
        return [s.endpoint for s in self.servers]

    def release(self, spec, party_data, seed):
        from ltm.sim.localnet.demo import write_party_csv

        self._start()
        if [s.endpoint for s in spec.servers] != [s.endpoint for s in self.servers]:
            raise ValueError("the job spec must name this deployment's server endpoints "
                             "(build it with transport.endpoints(k))")
        if len(spec.parties) > len(self._party_ids):
            raise ValueError(f"at most {len(self._party_ids)} parties per networked job")
        self._jobs += 1
        job_dir = self.workdir / "jobs" / f"{self._jobs:05d}"
        job_dir.mkdir(parents=True, exist_ok=True)
        for p in spec.parties:
            write_party_csv(job_dir / f"{p.party_id}.csv", dict(party_data[p.party_id]))
        parties = []
        endpoints = ",".join(s.endpoint for s in self.servers)
        server_ids = ",".join(s.actor for s in self.servers)

        def start_parties() -> None:
            for p in spec.parties:
                argv = ["party", "--id", p.party_id, "--servers", endpoints, "--server-ids", server_ids,
                        "--job", spec.job_id, "--data", str(job_dir / f"{p.party_id}.csv"),
                        "--max-epsilon", repr(spec.privacy.epsilon),
                        "--max-delta", repr(max(spec.privacy.delta, 1e-300)),
                        # a reproduction keeps the paper's threat model (no corrupt party deducted)
                        "--allow-paper-calibration", "--seed", str(seed), "--budget-epsilon", "inf",
                        "--min-corrupt-parties", "0",
                        "--no-progress",
                        "--log-level", "warning"]
                parties.append(self.group.start_task("party", p.party_id, argv))

        try:
            release = asyncio.run(self._operate(spec, start_parties))
        finally:
            codes = {p.actor: p.proc.wait(timeout=120) for p in parties}
        failed = {k: v for k, v in codes.items() if v != 0}
        if failed:
            raise NetworkedJobFailed(f"networked job {spec.job_id}: parties failed {failed}:\n"
                               + "\n".join(p.log_tail() for p in parties if p.proc.returncode))
        shutil.rmtree(job_dir, ignore_errors=True)
        return release

    async def _operate(self, spec: JobSpec, start_parties) -> ReleasedSketch:
        from ltm.transport.tls import make_channel
        from ltm.v1 import ltm_pb2, ltm_pb2_grpc

        channel = make_channel(self.analyst.endpoint, self.certs, "operator",
                               options=[("grpc.ssl_target_name_override", "analyst")])
        try:
            stub = ltm_pb2_grpc.AnalystStub(channel)
            await stub.SubmitJob(ltm_pb2.SubmitJobRequest(spec_json=spec.canonical_json()), timeout=120.0)
            start_parties()
            labelled = spec.label_index is not None
            reply = await stub.RunJob(ltm_pb2.RunJobRequest(
                job_id=spec.job_id, deadline_s=self.deadline_s, model="ridge" if labelled else "lowrank",
                rank=1, lam=1.0, randomness="seeded (reproducible; NOT private: experiment)"),
                timeout=self.deadline_s + 300.0)
            report = json.loads(reply.report_json)
            got = await stub.GetRelease(ltm_pb2.GetReleaseRequest(job_id=spec.job_id), timeout=120.0)
        finally:
            await channel.close()
        return release_from_reply(spec, got, report["participants"])

def current() -> ReleaseBackend:
    """The release backend experiment cells should use (in-process unless the runner installed another)."""
    global _CURRENT
    if _CURRENT is None:
        _CURRENT = InProcessBackend()
    return _CURRENT


def install(backend: ReleaseBackend | None) -> ReleaseBackend | None:
    """Make ``backend`` current (None: back to in-process); returns the previous one."""
    global _CURRENT
    previous, _CURRENT = _CURRENT, backend
    return previous

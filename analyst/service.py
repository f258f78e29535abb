"""The analyst's gRPC layer (``ltm.v1.Analyst``): submit, run, status, results, fit.

Driven by an operator (certificate role ``operator``).  Jobs live in the analyst's durable store
(:mod:`ltm.analyst.store`) and run in the :class:`~ltm.analyst.jobs.JobRunner`, many at once; a restarted
analyst resumes the jobs it was running.  A finished job's outputs are also written to
``<out>/<job_id>/``: ``release.json`` (the scaled sketch, its columns and SHA-256),
``privacy_report.json``, ``model.json`` and ``report.json``.
"""
from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np

from ltm.analyst.coordinator import DEFAULT_RETRY, NotPublished, ReleaseFailed, Retries, RetryPolicy, grpc_links
from ltm.analyst.jobs import UNDECLARED_RANDOMNESS, JobRunner, fit_model, release_of, release_to_json, result_files  # noqa: F401
from ltm.analyst.store import AnalystStore
from ltm.errors import LtmError, ProtocolError
from ltm.identifiers import id_problem
from ltm.jobfile import MAX_COLUMNS, MAX_DEADLINE_S, MODELS, FitSpec
from ltm.jobspec import JobSpec, JobSpecError
from ltm.limits import ServerLimits, parse_spec
from ltm.transport.tls import authenticate
from ltm.v1 import ltm_pb2, ltm_pb2_grpc

log = logging.getLogger("ltm.analyst")


def _fit_of(fit_json: str) -> FitSpec | None:
    """The ``fit_json`` of a Submit request (JobSpecError for anything but a JSON object of fit keys)."""
    if not fit_json:
        return None
    try:
        d = json.loads(fit_json)
        if not isinstance(d, dict):
            raise TypeError(f"must be a JSON object, got {type(d).__name__}")
        fit = FitSpec.from_dict(d)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise JobSpecError([f"fit_json: {' '.join(str(exc).split())[:200] or type(exc).__name__}"]) from None
    _check_fit(fit.model, fit.lam, fit.rank)
    return fit


def _check_fit(model: str, lam: float, rank: int) -> None:
    if model and model not in MODELS:
        raise JobSpecError([f"fit model must be one of {', '.join(MODELS)}, got {model!r}"])
    if not (math.isfinite(lam) and lam >= 0):
        raise JobSpecError([f"fit lambda must be a finite number ≥ 0 (0 = the default rule), got {lam}"])
    if not 0 <= rank <= MAX_COLUMNS:
        raise JobSpecError([f"fit rank must be in [0, {MAX_COLUMNS}] (0 = the default), got {rank}"])


def _check_deadline(deadline_s: float, required: bool) -> None:
    if (required or deadline_s) and not (0 < deadline_s <= MAX_DEADLINE_S):
        raise JobSpecError([f"deadline_s must be a positive number of seconds, at most {MAX_DEADLINE_S:g}, "
                            f"got {deadline_s}"])


async def _check_job_id(context, job_id: str) -> None:
    """Refuse a job id outside the grammar (ltm.identifiers) before it is looked up or used."""
    problem = id_problem(job_id, "job id")
    if problem:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)


class AnalystService(ltm_pb2_grpc.AnalystServicer):
    """Coordinates jobs over the servers named in each job spec."""

    def __init__(self, connect: Callable[[str, str], grpc.aio.Channel], out_dir: Path, *,
                 insecure: bool = False, retry: RetryPolicy = DEFAULT_RETRY, state_dir: Path | None = None) -> None:
        self.connect = connect  # (endpoint, server id) → channel that verifies that server's identity
        self.retry = retry      # how long each call to a server is retried through transient failures
        self.server_stubs: dict[tuple[str, str], ltm_pb2_grpc.ServerStub] = {}
        self.out_dir = out_dir
        self.insecure = insecure
        self.store = AnalystStore(state_dir or out_dir)
        # A spec an operator submits is parsed like a server parses one (size, nesting, numbers, the
        # default servers' limits) before validation walks its n clients.
        self.limits = ServerLimits()
        self.runner = JobRunner(self.store, self._links, out_dir)

    def _links(self, spec: JobSpec, retries: Retries):
        return grpc_links(self._stubs(spec), spec, self.retry, retries)

    def _stubs(self, spec: JobSpec) -> list[ltm_pb2_grpc.ServerStub]:
        """Stubs for the job's servers, at the endpoints its spec names."""
        missing = [s.server_id for s in spec.servers if not s.endpoint]
        if missing:
            raise ProtocolError("INVALID_ARGUMENT", f"the job spec gives no endpoint for servers {missing}")
        for s in spec.servers:
            key = (s.server_id, s.endpoint)
            if key not in self.server_stubs:
                self.server_stubs[key] = ltm_pb2_grpc.ServerStub(self.connect(s.endpoint, s.server_id))
        return [self.server_stubs[(s.server_id, s.endpoint)] for s in spec.servers]

    async def _refuse(self, context, exc: Exception) -> None:
        """Abort the call with the status that fits ``exc`` (and a message a person can act on)."""
        if isinstance(exc, LtmError) and exc.code != "INTERNAL":  # the status each error class names
            await context.abort(grpc.StatusCode[exc.code], exc.status_message())
        if isinstance(exc, KeyError):
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, exc.args[0])
        if isinstance(exc, grpc.aio.AioRpcError):
            await context.abort(exc.code(), f"a server refused the job: {exc.details()}")
        raise exc

    async def SubmitJob(self, request, context):
        """Publish a job without running it (``RunJob`` runs it): the demo's two-step path."""
        await authenticate(context, {"operator"}, insecure=self.insecure)
        try:
            spec = await asyncio.to_thread(parse_spec, request.spec_json, self.limits)
            record = await self.runner.submit(spec, None, deadline_s=0.0, start=False)
        except (NotPublished, ReleaseFailed, JobSpecError, KeyError, ProtocolError, grpc.aio.AioRpcError) as exc:
            await self._refuse(context, exc)
        log.info("job submitted", extra={"job_id": spec.job_id, "digest": record.digest})
        return ltm_pb2.SubmitJobResponse(job_id=spec.job_id, job_digest=record.digest)

    async def RunJob(self, request, context):
        """Run a submitted job now and wait for it (operator only), with the fit the request gives (if
        any); returns its report, FAILED_PRECONDITION if it does not end done.
        """
        await authenticate(context, {"operator"}, insecure=self.insecure)
        await _check_job_id(context, request.job_id)
        try:
            _check_deadline(request.deadline_s, required=False)
            _check_fit(request.model, request.lam, request.rank)
        except JobSpecError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if self.store.get(request.job_id) is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id!r} was not submitted to this analyst")
        fit = None
        if request.model or request.lam or request.rank or request.no_debias:
            record = self.store.get(request.job_id)
            fit = FitSpec(model=request.model or ("ridge" if record.spec.label_index is not None else "lowrank"),
                          lam=request.lam, rank=request.rank or 5, debias=not request.no_debias)
        record = await self.runner.run_now(request.job_id, deadline_s=request.deadline_s or 60.0, fit=fit,
                                           randomness=request.randomness or None)
        if record.state != "done":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, record.error or f"job is {record.state}")
        return ltm_pb2.RunJobResponse(job_id=record.job_id, report_json=record.outputs["report.json"])

    async def Submit(self, request, context):
        """Accept a job (operator only): its spec, fit and deadline are checked, it is stored, published
        on every server and run in the background; returns its status.
        """
        await authenticate(context, {"operator"}, insecure=self.insecure)
        try:
            spec = await asyncio.to_thread(parse_spec, request.spec_json, self.limits)
            fit = _fit_of(request.fit_json)
            _check_deadline(request.deadline_s, required=True)
            record = await self.runner.submit(spec, fit, deadline_s=request.deadline_s,
                                              randomness=request.randomness or UNDECLARED_RANDOMNESS)
        except (NotPublished, ReleaseFailed, JobSpecError, KeyError, ProtocolError, grpc.aio.AioRpcError) as exc:
            await self._refuse(context, exc)
        except (ValueError, TypeError) as exc:  # a malformed fit_json
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"fit_json: {exc}")
        log.info("job submitted", extra={"job_id": spec.job_id, "digest": record.digest})
        return self._info(spec.job_id)

    async def Cancel(self, request, context):
        """Cancel a job that is not done (operator only): the analyst marks it cancelled durably and
        stops it, then tells every server to drop it; a server it cannot reach is named in the
        answer's ``error`` (repeat the cancel to tell it).  NOT_FOUND for a job never submitted here.
        """
        await authenticate(context, {"operator"}, insecure=self.insecure)
        await _check_job_id(context, request.job_id)
        reason = request.reason[:200]
        try:
            record = await self.runner.cancel(request.job_id, reason)
        except KeyError as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, exc.args[0])
        except ProtocolError as exc:
            await self._refuse(context, exc)
        missed = await self._tell_servers(record.spec, reason)
        note = f"cancelled by the operator{f': {reason}' if reason else ''}"
        if missed:
            note += f"; not yet told (repeat `ltm job cancel` to tell them): {'; '.join(missed)}"
        await asyncio.to_thread(self.store.cancel, request.job_id, note)
        log.info("job cancelled", extra={"job_id": request.job_id, "servers_not_told": missed})
        return self._info(request.job_id)

    async def _tell_servers(self, spec: JobSpec, reason: str) -> list[str]:
        """Ask every server of ``spec`` to drop the job; returns "server-i (CODE: why)" for each that
        did not confirm."""
        try:
            stubs = self._stubs(spec)
        except ProtocolError as exc:
            return [f"every server ({exc.message})"]

        async def one(stub) -> None:
            await stub.CancelJob(ltm_pb2.CancelJobRequest(job_id=spec.job_id, reason=reason), timeout=20.0)

        results = await asyncio.gather(*(one(s) for s in stubs), return_exceptions=True)
        return [f"{srv.server_id} ({r.code().name if isinstance(r, grpc.aio.AioRpcError) else type(r).__name__}: "
                f"{r.details() if isinstance(r, grpc.aio.AioRpcError) else r})"
                for srv, r in zip(spec.servers, results) if isinstance(r, BaseException)]

    def _info(self, job_id: str) -> ltm_pb2.JobInfo:
        st = self.runner.status(job_id)
        return ltm_pb2.JobInfo(job_id=st["job_id"], job_digest=st["job_digest"], state=st["state"], phase=st["phase"],
                               error=st["error"], submitted_at=st["submitted_at"], close_at=st["close_at"],
                               release_sha256=st["release_sha256"], progress_json=json.dumps(st["progress"]))

    async def GetStatus(self, request, context):
        """The status of one job, or of every job the analyst holds when the request names none."""
        await authenticate(context, {"operator"}, insecure=self.insecure)
        if request.job_id:  # empty: every job
            await _check_job_id(context, request.job_id)
        ids = [request.job_id] if request.job_id else await asyncio.to_thread(self.store.job_ids)
        try:
            infos = [self._info(i) for i in ids]
        except KeyError as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, exc.args[0])
        return ltm_pb2.GetStatusResponse(jobs=infos)

    async def GetResult(self, request, context):
        """A finished job's output files and release hash; FAILED_PRECONDITION while it runs or if it failed."""
        await authenticate(context, {"operator"}, insecure=self.insecure)
        await _check_job_id(context, request.job_id)
        record = await asyncio.to_thread(self.store.get, request.job_id)
        if record is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id!r} was not submitted to this analyst")
        if record.state != "done":
            detail = f": {record.error}" if record.error else ""
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"job {request.job_id!r} has no result: it is {record.state}{detail}")
        files = await asyncio.to_thread(result_files, record)
        return ltm_pb2.GetResultResponse(job_id=record.job_id, release_sha256=record.release_sha256, files=files)

    async def _release(self, job_id: str, context):
        record = await asyncio.to_thread(self.store.get, job_id)
        if record is None or record.state != "done":
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job {job_id!r} has no release yet")
        return await asyncio.to_thread(release_of, record)

    async def GetRelease(self, request, context):
        """The job's released sketch: float64 (m, D) little-endian bytes, its SHA-256 and privacy report."""
        await authenticate(context, {"operator"}, insecure=self.insecure)
        await _check_job_id(context, request.job_id)
        release = await self._release(request.job_id, context)
        m = np.ascontiguousarray(release.matrix, dtype="<f8")
        return ltm_pb2.GetReleaseResponse(job_id=request.job_id, rows=m.shape[0], cols=m.shape[1],
                                          matrix_f64=m.tobytes(), release_sha256=release.sha256,
                                          privacy_json=json.dumps(release.privacy))

    async def Fit(self, request, context):
        """Fit another model on a finished job's release (post-processing: no privacy cost); returns it as JSON."""
        await authenticate(context, {"operator"}, insecure=self.insecure)
        await _check_job_id(context, request.job_id)
        release = await self._release(request.job_id, context)
        try:
            _check_fit(request.model, request.lam, request.rank)
            model = fit_model(release, request.model or "ridge", lam=request.lam, rank=request.rank or 5,
                              debias=not request.no_debias)
        except ValueError as exc:  # JobSpecError included
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return ltm_pb2.FitResponse(model_json=json.dumps(model))

"""The analyst's gRPC layer (``ltm.v1.Analyst``): submit, run, get a release, fit.

Driven by an operator (certificate role ``operator``).  A finished job's outputs are written to
``<out>/<job_id>/``: ``release.json`` (the scaled sketch, its columns and SHA-256),
``privacy_report.json`` and ``model.json``.
"""
from __future__ import annotations

import asyncio
import json
import time
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from analyst.coordinator import DEFAULT_RETRY, NotPublished, ReleaseFailed, RetryPolicy, publish, run_job
from analyst.estimators import LowRank, make_estimator, release_lambda
from analyst.release import ReleasedSketch
from ltm.errors import ProtocolError
from ltm.jobspec import JobSpec, JobSpecError, validate_job
from ltm.v1 import ltm_pb2, ltm_pb2_grpc
from transport.tls import authenticate

log = logging.getLogger("ltm.analyst")


def fit_model(release: ReleasedSketch, model: str, *, lam: float = 0.0, rank: int = 5,
              debias: bool = True) -> dict[str, Any]:
    """Fit ``model`` on a release; returns a JSON-ready description."""
    if model == "lowrank":
        est = LowRank(rank).fit(release)
        return {"model": "lowrank", "rank": rank, "components": est.components_.tolist(),
                "columns": list(release.columns)}
    lam = lam or release_lambda(release)[0]
    est = make_estimator(model, lam=lam, rank=rank, debias=debias).fit(release)
    features = [c for i, c in enumerate(release.columns) if i != release.label and i != release.intercept]
    return {"model": model, "lambda": lam, "debias": bool(getattr(est, "debias", False)),
            "coef": dict(zip(features, map(float, est.coef_))), "intercept": float(est.intercept_),
            "target": release.columns[release.label] if release.label is not None else None}


def release_to_json(release: ReleasedSketch) -> dict[str, Any]:
    return {"columns": list(release.columns), "matrix": release.matrix.tolist(), "n": release.n,
            "centers": release.centers.tolist(), "scales": release.scales.tolist(), "label": release.label,
            "intercept": release.intercept, "noise_variance_per_column": release.noise_variance_per_column,
            "sha256": release.sha256, "kind": release.kind}


class AnalystService(ltm_pb2_grpc.AnalystServicer):
    """Coordinates jobs over the servers named in each job spec."""

    def __init__(self, connect: Callable[[str, str], grpc.aio.Channel], out_dir: Path, *,
                 insecure: bool = False, retry: RetryPolicy = DEFAULT_RETRY) -> None:
        self.connect = connect  # (endpoint, server id) → channel that verifies that server's identity
        self.retry = retry      # how long each call to a server is retried through transient failures
        self.server_stubs: dict[tuple[str, str], ltm_pb2_grpc.ServerStub] = {}
        self.out_dir = out_dir
        self.insecure = insecure
        self.specs: dict[str, JobSpec] = {}
        self.releases: dict[str, ReleasedSketch] = {}

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

    async def SubmitJob(self, request, context):
        await authenticate(context, {"operator"}, insecure=self.insecure)
        try:
            spec = JobSpec.from_json(request.spec_json)
            await asyncio.to_thread(validate_job, spec)
            digest = await publish(self._stubs(spec), spec, policy=self.retry)
        except NotPublished as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        except ReleaseFailed as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except JobSpecError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except ProtocolError as exc:
            await context.abort(getattr(grpc.StatusCode, exc.code), exc.message)
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), f"a server refused the job: {exc.details()}")
        self.specs[spec.job_id] = spec
        log.info("job submitted", extra={"job_id": spec.job_id, "digest": digest})
        return ltm_pb2.SubmitJobResponse(job_id=spec.job_id, job_digest=digest)

    async def RunJob(self, request, context):
        await authenticate(context, {"operator"}, insecure=self.insecure)
        spec = self.specs.get(request.job_id)
        if spec is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id!r} was not submitted to this analyst")
        label = request.randomness or "declared by each party (not visible to the analyst)"
        try:
            run = await run_job(self._stubs(spec), spec, deadline_s=request.deadline_s or 60.0,
                                randomness_label=label, policy=self.retry)
        except ReleaseFailed as exc:
            log.error("no release", extra={"job_id": spec.job_id, "reason": str(exc), "coverage": exc.coverage})
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), f"a server refused: {exc.details()}")
        self.releases[spec.job_id] = run.release
        model_name = request.model or ("ridge" if run.release.label is not None else "lowrank")
        t_fit = time.monotonic()
        model = fit_model(run.release, model_name, lam=request.lam, rank=request.rank or 5,
                          debias=not request.no_debias)
        run.timing_s["fit"] = time.monotonic() - t_fit
        report = {"job_id": spec.job_id, "job_digest": spec.digest, "release_sha256": run.release.sha256,
                  "participants": int(run.participants.sum()), "held_per_server": run.held_per_server,
                  "release_bytes_per_server": run.release_bytes_per_server, "privacy": run.release.privacy,
                  "model": model, "timing_s": run.timing_s, "coverage": run.coverage,
                  "server_retries": run.retries}
        self._write_outputs(spec.job_id, run.release, model, report)
        log.info("job released", extra={"job_id": spec.job_id, "sha256": run.release.sha256})
        return ltm_pb2.RunJobResponse(job_id=spec.job_id, report_json=json.dumps(report))

    def _write_outputs(self, job_id: str, release: ReleasedSketch, model: dict, report: dict) -> None:
        d = self.out_dir / job_id
        d.mkdir(parents=True, exist_ok=True)
        (d / "release.json").write_text(json.dumps(release_to_json(release)))
        (d / "privacy_report.json").write_text(json.dumps(release.privacy, indent=2))
        (d / "model.json").write_text(json.dumps(model, indent=2))
        (d / "report.json").write_text(json.dumps(report, indent=2))

    async def GetRelease(self, request, context):
        await authenticate(context, {"operator"}, insecure=self.insecure)
        release = self.releases.get(request.job_id)
        if release is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id!r} has no release yet")
        m = np.ascontiguousarray(release.matrix, dtype="<f8")
        return ltm_pb2.GetReleaseResponse(job_id=request.job_id, rows=m.shape[0], cols=m.shape[1],
                                          matrix_f64=m.tobytes(), release_sha256=release.sha256,
                                          privacy_json=json.dumps(release.privacy))

    async def Fit(self, request, context):
        await authenticate(context, {"operator"}, insecure=self.insecure)
        release = self.releases.get(request.job_id)
        if release is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id!r} has no release yet")
        try:
            model = fit_model(release, request.model or "ridge", lam=request.lam, rank=request.rank or 5,
                              debias=not request.no_debias)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return ltm_pb2.FitResponse(model_json=json.dumps(model))

"""The analyst's job runner: many jobs at once, each persisted, each resumable after a crash.

A job is submitted with its public spec, what to fit (:class:`ltm.jobfile.FitSpec`) and how long
intake stays open.  The runner commits it to the :class:`~ltm.analyst.store.AnalystStore` (with the
*absolute* closing time), then, in a background task per job, runs the one coordinator
(:func:`ltm.analyst.coordinator.coordinate`: publish → wait → close → intersect → release →
reconstruct), fits the model and commits the result shares, participant set and output files
before reporting the job done.  On start, every job the store has as ``running`` is resumed; the
servers' idempotence makes the resumed job release the same bytes.

The analyst never sees data: only the job spec, per-server counts of clients held, and the
result shares of the released sketch.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ltm.analyst.coordinator import JobRun, Retries, ServerLink, coordinate, publish_links
from ltm.analyst.estimators import LowRank, intercept_only, make_estimator, release_lambda
from ltm.analyst.release import ReleasedSketch
from ltm.analyst.replicated import release_from_shares
from ltm.analyst.store import AnalystStore, JobRecord
from ltm.client_set import ClientSet
from ltm.errors import ProtocolError
from ltm.identifiers import id_problem
from ltm.jobfile import FitSpec, plan_for
from ltm.jobspec import JobSpec, JobSpecError, validate_job
from ltm.jsonio import json_default

log = logging.getLogger("ltm.analyst")
#: What the operator is told about the parties' randomness when nobody declared it.
UNDECLARED_RANDOMNESS = "declared by each party (not visible to the analyst)"
OUTPUT_FILES = ("release.json", "privacy_report.json", "model.json", "report.json")


def fallback_reason(spec: JobSpec, fit: FitSpec) -> str:
    """Why the analyst releases the intercept-only model instead of ``fit.model`` (empty: it does
    not): the plan for this job's release kind (:func:`ltm.jobfile.plan_for`, public inputs only)
    predicts R² ≤ 0 and the job's ``[fit] fallback`` is on (the default)."""
    if not fit.fallback or fit.model in ("none", "lowrank") or spec.label_index is None \
            or spec.sketch.kind not in ("gram", "sparse", "dense"):
        return ""
    try:
        return plan_for(spec, True, kinds=(spec.sketch.kind,)).warning
    except ValueError:  # the planner finds no feasible candidate of this kind: nothing to warn about
        return ""


def fit_model(release: ReleasedSketch, model: str, *, lam: float = 0.0, rank: int = 5,
              debias: bool = True, fallback: str = "") -> dict[str, Any]:
    """Fit ``model`` on a release; returns a JSON-ready description ("none": nothing to fit).
    ``fallback``: a reason to release the intercept-only model instead (:func:`fallback_reason`)."""
    if model == "none":
        return {"model": "none"}
    if model == "lowrank":
        est = LowRank(rank).fit(release)
        return {"model": "lowrank", "rank": rank, "components": est.components_.tolist(),
                "columns": list(release.columns)}
    # λ = 0 in a job's [fit] means "the default rule": report the λ the fit used, and which rule gave it
    # (the gram rule can itself give 0: then the noisy XᵀX needs no ridge).
    lam, lam_rule = (lam, "given in the job's [fit]") if lam else release_lambda(release)
    est = intercept_only(release) if fallback else make_estimator(model, lam=lam, rank=rank, debias=debias).fit(release)
    features = [c for i, c in enumerate(release.columns) if i != release.label and i != release.intercept]
    return {"model": model, "released_model": "intercept-only" if fallback else model,
            "fallback": {"used": bool(fallback), "why": fallback or "the plan predicts R² > 0"},
            "lambda": lam, "lambda_rule": lam_rule, "debias": bool(getattr(est, "debias", False)),
            "coef": dict(zip(features, map(float, est.coef_))), "intercept": float(est.intercept_),
            "target": release.columns[release.label] if release.label is not None else None}


def release_to_json(release: ReleasedSketch, with_matrix: bool = True) -> dict[str, Any]:
    """The released sketch as ``release.json``'s JSON object: columns, the (m, D) matrix as nested
    lists (``with_matrix=False``: None, for :func:`release_json`, which encodes it in blocks), n,
    per-column centres and scales, the label and intercept indices, the noise variance per column,
    the SHA-256, the sketch kind and a lifted release's per-entry noise variances.
    """
    return {"columns": list(release.columns), "matrix": release.matrix.tolist() if with_matrix else None,
            "n": release.n,
            "centers": release.centers.tolist(), "scales": release.scales.tolist(), "label": release.label,
            "intercept": release.intercept, "noise_variance_per_column": release.noise_variance_per_column,
            "sha256": release.sha256, "kind": release.kind,
            "entry_noise_variance": (None if release.entry_noise_variance is None
                                     else release.entry_noise_variance.tolist())}


#: Rows of the release matrix JSON-encoded at a time by :func:`release_json`.
_JSON_ROW_BLOCK = 4096


def release_json_pieces(release: ReleasedSketch) -> Iterator[str]:
    """The text of ``json.dumps(release_to_json(release))``, byte for byte, in pieces: the matrix
    is encoded a block of rows at a time, so a 63 911-row sparse release (10⁸ clients) is written
    holding one block, not the ~60 MB of one ``tolist()`` and one encoder pass (each float a Python
    object and an encoded fragment at once) that kept the analyst above 256 MB."""
    matrix = release.matrix
    head = json.dumps(release_to_json(release, with_matrix=False))
    # Keys keep release_to_json's order ("matrix" second); the placeholder is the one "matrix": null
    # outside a string (a quote inside an encoded string is always escaped).
    before, after = head.split('"matrix": null', 1)
    yield before + '"matrix": ['
    for i in range(0, matrix.shape[0], _JSON_ROW_BLOCK):
        yield (", " if i else "") + json.dumps(matrix[i:i + _JSON_ROW_BLOCK].tolist())[1:-1]
    yield "]" + after


def release_json(release: ReleasedSketch) -> str:
    """``json.dumps(release_to_json(release))``, byte for byte (:func:`release_json_pieces`)."""
    return "".join(release_json_pieces(release))


#: The output file holding the release itself (re-derived from the stored shares, not stored).
RELEASE_FILE = "release.json"


def result_files(record: JobRecord) -> dict[str, str]:
    """A finished job's output files: the stored ones and ``release.json``, re-derived bit for bit
    from the stored result shares (:func:`release_of`; a record from before it was left out of the
    store carries its own)."""
    files = dict(record.outputs or {})
    if RELEASE_FILE not in files:
        files[RELEASE_FILE] = release_json(release_of(record))
    return files


def release_of(record: JobRecord) -> ReleasedSketch:
    """The released sketch of a finished job, re-derived bit for bit from its stored result shares."""
    if record.state != "done" or record.shares is None or record.participants is None:
        raise KeyError(f"job {record.job_id!r} has no release yet (state {record.state})")
    spec = record.spec
    release = release_from_shares(spec, record.shares, record.participants, randomness=record.randomness)
    stored = (record.outputs or {}).get("privacy_report.json")  # as reported when the job finished
    return replace(release, privacy=json.loads(stored)) if stored else release


#: A report lists the participant ranges only up to this many (else just their number).
REPORT_MAX_RANGES = 64


def participant_ranges_json(participants: ClientSet) -> dict[str, Any]:
    """``participant_range_count`` and, when there are at most :data:`REPORT_MAX_RANGES`, the
    ``participant_ranges`` as ``[start, stop)`` pairs: a report never lists n of anything."""
    r = participants.ranges
    return {"participant_range_count": len(r),
            **({"participant_ranges": r.tolist()} if len(r) <= REPORT_MAX_RANGES else {})}


LinksFor = Callable[[JobSpec, Retries], list[ServerLink]]


def check_job_id(job_id: str) -> None:
    """Refuse a job id that is not one directory name: the analyst writes a finished job's files to
    ``<out>/<job_id>/`` (the job file parser refuses these too, but a spec may arrive over gRPC)."""
    problem = id_problem(job_id, "job id")  # the one grammar of ids (ltm.identifiers)
    if problem:
        raise JobSpecError([f"{problem} (it names the analyst's output directory)"])


class JobRunner:
    """Runs and persists jobs (see module docstring).

    ``links_for(spec, retries)``: the links to the job's servers (gRPC in the analyst process).
    ``out_dir``: where each finished job's files are also written, under ``<out_dir>/<job_id>/``.
    """

    def __init__(self, store: AnalystStore, links_for: LinksFor, out_dir: Path | None = None,
                 poll_s: float = 0.2) -> None:
        self.store = store
        self.links_for = links_for
        self.out_dir = out_dir
        self.poll_s = poll_s
        self.tasks: dict[str, asyncio.Task] = {}
        self.live: dict[str, dict] = {}  # job id → what the running coordinator last said (not persisted)

    # ------------------------------------------------------------------ submit and start
    async def submit(self, spec: JobSpec, fit: FitSpec | None, *, deadline_s: float,
                     randomness: str = UNDECLARED_RANDOMNESS, start: bool = True) -> JobRecord:
        """Validate, persist, publish to every server and (``start``) run in the background.

        Idempotent for the same spec (returns the stored job; a failed one is retried).  Raises
        JobSpecError (invalid), KeyError (the id is taken by another spec), or the publishing
        error (NotPublished: a server is unreachable; the job stays stored, failed).
        """
        check_job_id(spec.job_id)
        await asyncio.to_thread(validate_job, spec)
        fit_d = (fit or FitSpec(model="ridge" if spec.label_index is not None else "lowrank")).to_dict()
        target = "running" if start else "published"
        record = await asyncio.to_thread(self.store.add, spec, fit_d, randomness, time.time() + deadline_s, target)
        if record.state == "failed" or (start and record.state == "published"):
            await asyncio.to_thread(self.store.update, spec.job_id, state=target, error="",
                                    close_at=time.time() + deadline_s, fit_json=json.dumps(fit_d))
        if start:
            if record.state != "done":
                self.start(spec.job_id)
        elif record.state != "done":
            try:
                await publish_links(self.links_for(spec, {}), spec)
                await asyncio.to_thread(self.store.update, spec.job_id, published=1)
            except Exception as exc:
                await asyncio.to_thread(self.store.update, spec.job_id, state="failed", error=str(exc))
                raise
        return await asyncio.to_thread(self.store.get, spec.job_id)  # type: ignore[return-value]

    async def run_now(self, job_id: str, *, deadline_s: float, fit: FitSpec | None = None,
                      randomness: str | None = None) -> JobRecord:
        """Start a ``published`` job with a fresh deadline (and fit) and wait for it; a running job is
        awaited, a finished one returned."""
        record = self.store.get(job_id)
        if record is None:
            raise KeyError(f"job {job_id!r} was not submitted to this analyst")
        if record.state == "cancelled":
            return record
        if record.state in ("published", "failed"):
            fields: dict[str, Any] = {"state": "running", "error": "", "close_at": time.time() + deadline_s}
            if fit is not None:
                fields["fit_json"] = json.dumps(fit.to_dict())
            if randomness:
                fields["randomness"] = randomness
            await asyncio.to_thread(self.store.update, job_id, **fields)
        if record.state != "done":
            await self.start(job_id)
        return self.store.get(job_id)  # type: ignore[return-value]

    async def cancel(self, job_id: str, reason: str) -> JobRecord:
        """Cancel a job that is not done: mark it cancelled durably (a restart does not resume it, a
        submit under its id is refused), then stop its task.  Telling the servers is the caller's
        (:meth:`ltm.analyst.service.AnalystService.Cancel`).  KeyError if it was never submitted here;
        a done job raises :class:`~ltm.errors.ProtocolError` (its release exists)."""
        record = await asyncio.to_thread(self.store.get, job_id)
        if record is None:
            raise KeyError(f"job {job_id!r} was not submitted to this analyst")
        if record.state == "done":
            raise ProtocolError("FAILED_PRECONDITION", f"job {job_id!r} is done: its release exists and cannot be "
                                                       f"taken back; there is nothing to cancel")
        if record.state != "cancelled":
            await asyncio.to_thread(self.store.cancel, job_id, reason)
        task = self.tasks.pop(job_id, None)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self.live.pop(job_id, None)
        log.info("job cancelled", extra={"job_id": job_id, "reason": reason})
        return await asyncio.to_thread(self.store.get, job_id)  # type: ignore[return-value]

    def start(self, job_id: str) -> asyncio.Task:
        """The job's background task (started if it is not running)."""
        task = self.tasks.get(job_id)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._run(job_id), name=f"job {job_id}")
            self.tasks[job_id] = task
        return task

    async def resume(self) -> list[str]:
        """Restart every job the store has as ``running`` (after a crash or restart)."""
        ids = await asyncio.to_thread(self.store.job_ids, "running")
        for job_id in ids:
            log.info("resuming job", extra={"job_id": job_id})
            self.start(job_id)
        return ids

    async def stop(self) -> None:
        """Cancel every running job task and wait for them to end (their state stays in the store)."""
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)

    # ------------------------------------------------------------------ the job
    async def _run(self, job_id: str) -> None:
        record = await asyncio.to_thread(self.store.get, job_id)
        if record is None or record.state != "running":
            return
        spec = record.spec
        retries: Retries = {}
        self.live[job_id] = {"phase": "starting"}

        def progress(phase: str, info: dict) -> None:
            if self.live.get(job_id, {}).get("phase") != phase:
                # visible after a restart too; once waiting, every server has acknowledged the job
                self.store.update(job_id, phase=phase, **({"published": 1} if phase == "waiting" else {}))
            self.live[job_id] = {"phase": phase, **info}

        try:
            run = await coordinate(self.links_for(spec, retries), spec,
                                   deadline_s=max(record.close_at - time.time(), 0.0),
                                   randomness_label=record.randomness, publish_first=not record.published,
                                   poll_s=self.poll_s, retries=retries, progress=progress)
            outputs = await asyncio.to_thread(self._outputs, record, run)
            # release.json is not stored: it is re-derived from the stored shares on request
            # (result_files) and streamed to its file, so neither the store (whose every record
            # read would decode it) nor memory holds m × W numbers as text — 14.6 MB at a
            # 63 911-row sketch, copied on each read.
            await asyncio.to_thread(self.store.finish, job_id, release_sha256=run.release.sha256,
                                    participants=run.participants, shares=run.result_shares, outputs=outputs)
            await asyncio.to_thread(self._write_files, job_id, outputs, run.release)
            log.info("job released", extra={"job_id": job_id, "sha256": run.release.sha256})
        except asyncio.CancelledError:
            raise  # shutdown: the job stays 'running' and is resumed by the next start
        except Exception as exc:  # a refusal or an unreachable server: the job fails, with the reason
            reason = describe_failure(exc)
            log.error("job failed", extra={"job_id": job_id, "reason": reason,
                                           "coverage": getattr(exc, "coverage", None)})
            await asyncio.to_thread(self.store.update, job_id, state="failed", phase="", error=reason)
        finally:
            self.live.pop(job_id, None)

    def _outputs(self, record: JobRecord, run: JobRun) -> dict[str, str]:
        spec, fit = record.spec, FitSpec.from_dict(record.fit)
        t = time.monotonic()
        model = fit_model(run.release, fit.model, lam=fit.lam, rank=fit.rank, debias=fit.debias,
                          fallback=fallback_reason(spec, fit))
        run.timing_s["fit"] = time.monotonic() - t
        report = {"job_id": spec.job_id, "job_digest": spec.digest, "release_sha256": run.release.sha256,
                  "participants": run.participants.count, **participant_ranges_json(run.participants),
                  "held_per_server": run.held_per_server,
                  "release_bytes_per_server": run.release_bytes_per_server, "privacy": run.release.privacy,
                  "prejobs": [{"kind": p.kind, "job_id": p.job_id, "digest": p.digest, "epsilon": p.epsilon,
                               "delta": p.delta} for p in spec.prejobs],
                  "fit": {**fit.to_dict(), **({"lambda": model["lambda"]} if "lambda" in model else {})},
                  "model": model, "timing_s": run.timing_s, "coverage": run.coverage,
                  "server_retries": run.retries}
        return {"privacy_report.json": json.dumps(run.release.privacy, indent=2),
                "model.json": json.dumps(model, indent=2),
                "report.json": json.dumps(report, indent=2, default=json_default)}

    def _write_files(self, job_id: str, outputs: dict[str, str], release: ReleasedSketch | None = None) -> None:
        """Write the outputs, and ``release`` as release.json streamed block by block."""
        if self.out_dir is None:
            return
        d = self.out_dir / job_id
        d.mkdir(parents=True, exist_ok=True)
        if release is not None:
            with open(d / RELEASE_FILE, "w") as f:
                for piece in release_json_pieces(release):
                    f.write(piece)
        for name, text in outputs.items():
            (d / name).write_text(text)

    def status(self, job_id: str) -> dict[str, Any]:
        """What the operator may see: state, phase, error, times, the live progress (no data)."""
        record = self.store.get(job_id)
        if record is None:
            raise KeyError(f"job {job_id!r} was not submitted to this analyst")
        return {"job_id": record.job_id, "job_digest": record.digest, "state": record.state,
                "phase": self.live.get(job_id, {}).get("phase", record.phase), "error": record.error,
                "submitted_at": record.submitted_at, "close_at": record.close_at,
                "release_sha256": record.release_sha256,
                "progress": {k: v for k, v in self.live.get(job_id, {}).items() if k != "phase"}}


def describe_failure(exc: BaseException) -> str:
    """One line saying why a job failed (a gRPC refusal reads "a server refused: CODE: details")."""
    import grpc

    if isinstance(exc, grpc.aio.AioRpcError):
        return f"a server refused: {exc.code().name}: {exc.details()}"
    return str(exc)


"""``ltm job``: the operator's commands, from a job file to the fitted model.

* ``ltm job check FILE`` — parse and validate a job file (no network); print its digest and the
  resolved public choices, or every problem, one line each.
* ``ltm job submit FILE --analyst HOST:PORT`` — send the job to the analyst, which persists it,
  publishes it to every server and runs it (parties join with ``ltm party --job ID``).
* ``ltm job status [ID] --analyst HOST:PORT`` — state and phase of one job or all jobs.
* ``ltm job result ID --analyst HOST:PORT --out DIR`` — write a finished job's files and its figure
  into ``DIR/ID/``.
* ``ltm job bounds DRAFT --analyst HOST:PORT --epsilon E --out FILE`` — the DP pre-job that
  estimates the column centres and spreads nobody knows (:mod:`ltm.analyst.bounds`).

The flags are declared in ``ltm/cli/job.py``.  No command here takes a data file: the analyst's side of a job is public information only.  The
network modules (grpc, stubs) are imported only by the commands that talk to the analyst.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from ltm.errors import CommandError
from ltm.jobfile import JobFile, forced_choice_warning, parse_job_file, read_job_text, spec_summary


def read_job_file(path: str) -> JobFile:
    """Parse a job file from disk (the only I/O: the file the analyst wrote)."""
    return parse_job_file(read_job_text(path), source=str(path))  # bounded read, UTF-8 checked


def run_check(args: argparse.Namespace) -> int:
    """``ltm job check``: validate a job file locally and print its digest, resolved choices and noise
    plan (``--json``: as JSON); returns 0 (a bad file raises :class:`~ltm.jobfile.JobFileError`).
    """
    jf = read_job_file(args.file)
    summary = spec_summary(jf)
    plan = jf.spec.noise_plan()
    summary["plan_reason"] = jf.plan_reason
    summary["plan_warning"] = jf.plan_warning
    summary["noise"] = {"mechanism": plan.mechanism, "sigma_client": plan.sigma_client,
                        "sigma_release": plan.sigma_release, "laplace_scale": plan.laplace_scale}
    summary["warnings"] = [w for w in (forced_choice_warning(jf),) if w]
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    s = jf.spec
    print(f"{args.file}: OK — job {s.job_id!r}, digest {s.digest}")
    if jf.plan_warning:  # loud: on stderr too, where a script that keeps only the status line still sees it
        print(f"  WARNING: {jf.plan_warning}")
        print(f"{args.file}: WARNING: {jf.plan_warning}", file=sys.stderr)
    print(f"  {s.partition} partition, n={s.n}, {len(s.parties)} parties, {s.k} servers "
          f"({', '.join(f'{v.server_id}={v.endpoint}' for v in s.servers)})")
    print(f"  release: {s.sketch.kind} m={s.sketch.m} s={s.sketch.s}; fit: {jf.fit.model}")
    if jf.plan_reason:
        print(f"  release kind 'auto' — the planner chose {s.sketch.kind}: {jf.plan_reason}")
    pr = s.privacy
    print(f"  privacy: ({pr.epsilon:g}, {pr.delta:g})-DP {pr.mechanism} ({pr.calibration}), promised honest load "
          f"L={pr.min_honest_load}, t′={pr.t_prime}, corrupt parties={pr.corrupt_parties}, "
          f"σ_client={plan.sigma_client:.4g}, σ_release={plan.sigma_release:.4g}")
    t = s.tolerated_colluding_servers
    print(f"  trust: private if at most {t} of {s.k} servers collude"
          + (" (an honest majority: the replicated release; parties must accept it, "
             "`ltm party --min-colluding-servers`)" if s.replicated else ""))
    for c in s.columns:
        print(f"  column {c.name!r:28s} {c.role:9s} x' = (x − {c.center:.6g}) / {c.scale:.6g}")
    for x in s.prejobs:
        print(f"  transforms from DP pre-job {x.job_id!r} ({x.kind}, ε={x.epsilon:g}, δ={x.delta:g}, "
              f"digest {x.digest[:12]}…)")
    for w in summary["warnings"]:
        print(f"  warning: {w}")
    return 0


# ---------------------------------------------------------------------------- talking to the analyst
def _need_analyst(args: argparse.Namespace) -> None:
    if not args.analyst:
        raise CommandError("give the analyst's endpoint with --analyst HOST:PORT (or set LTM_ANALYST)")
    if not args.insecure and not args.certs:
        raise CommandError("give --certs DIR (the operator's certificate) or --insecure for a plaintext test")


async def _with_analyst(args: argparse.Namespace, fn):
    """Run ``fn(stub)`` on an Analyst stub over a channel authenticated as ``operator``."""
    import grpc

    from ltm.transport.tls import make_channel
    from ltm.v1 import ltm_pb2_grpc

    _need_analyst(args)
    options = None if args.insecure else [("grpc.ssl_target_name_override", "analyst")]
    channel = make_channel(args.analyst, Path(args.certs) if args.certs else None, "operator",
                           insecure=bool(args.insecure), options=options)
    try:
        return await fn(ltm_pb2_grpc.AnalystStub(channel))
    except grpc.aio.AioRpcError as exc:
        raise CommandError(f"the analyst at {args.analyst} answered {exc.code().name}: {exc.details()}") \
            from None
    finally:
        await channel.close()


def info_dict(info) -> dict[str, Any]:
    """A ``JobInfo`` message as a plain dict (its ``progress_json`` decoded)."""
    return {"job_id": info.job_id, "job_digest": info.job_digest, "state": info.state, "phase": info.phase,
            "error": info.error, "submitted_at": info.submitted_at, "close_at": info.close_at,
            "release_sha256": info.release_sha256, "progress": json.loads(info.progress_json or "{}")}


async def submit_job(stub, jf: JobFile, randomness: str = "") -> dict[str, Any]:
    """Submit the job file's spec, fit and deadline to the analyst; returns the job's status dict."""
    from ltm.v1 import ltm_pb2

    info = await stub.Submit(ltm_pb2.SubmitRequest(spec_json=jf.spec.canonical_json(),
                                                   fit_json=json.dumps(jf.fit.to_dict()),
                                                   deadline_s=jf.deadline_s, randomness=randomness), timeout=120.0)
    return info_dict(info)


async def job_status(stub, job_id: str = "") -> list[dict[str, Any]]:
    """The status dicts of one job (``job_id``) or of every job the analyst holds ("")."""
    from ltm.v1 import ltm_pb2

    reply = await stub.GetStatus(ltm_pb2.GetStatusRequest(job_id=job_id), timeout=30.0)
    return [info_dict(i) for i in reply.jobs]


async def wait_done(stub, job_id: str, timeout: float, poll_s: float = 0.5) -> dict[str, Any]:
    """Poll until the job is done or failed (or ``timeout`` passes); returns its last status.  An
    analyst that is briefly down (restarting) is waited for."""
    import grpc

    end = time.monotonic() + timeout
    while True:
        try:
            st = (await job_status(stub, job_id))[0]
            if st["state"] in ("done", "failed", "cancelled"):
                return st
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
            st = {"job_id": job_id, "state": "unreachable", "error": exc.details()}
        if time.monotonic() > end:
            return st
        await asyncio.sleep(poll_s)


async def job_result(stub, job_id: str) -> tuple[str, dict[str, str]]:
    """A finished job's release SHA-256 and its output files (name → text)."""
    from ltm.v1 import ltm_pb2

    reply = await stub.GetResult(ltm_pb2.GetResultRequest(job_id=job_id), timeout=60.0)
    return reply.release_sha256, dict(reply.files)


def run_submit(args: argparse.Namespace) -> int:
    """``ltm job submit``: submit a job file, optionally wait until it ends; returns 0, or 1 when
    the job failed or was cancelled.
    """
    jf = read_job_file(args.file)

    async def go(stub):
        st = await submit_job(stub, jf, args.randomness or "")
        if args.wait:
            st = await wait_done(stub, jf.spec.job_id, args.timeout or jf.deadline_s + 300.0)
        return st

    st = asyncio.run(_with_analyst(args, go))
    print(f"job {st['job_id']!r} (digest {st.get('job_digest', '')[:16]}…): {st['state']}"
          + (f", {st['phase']}" if st.get("phase") else "")
          + (f" — {st['error']}" if st.get("error") else "")
          + (f"; release sha256 {st['release_sha256']}" if st.get("release_sha256") else ""))
    if not args.wait:
        print(f"  parties join with: ltm party --job {jf.spec.job_id} --id PARTY --data THEIR_FILE "
              f"--servers {','.join(v.endpoint for v in jf.spec.servers)} "
              f"--server-ids {','.join(v.server_id for v in jf.spec.servers)} --certs DIR")
    return 1 if st["state"] in ("failed", "cancelled") else 0


def run_status(args: argparse.Namespace) -> int:
    """``ltm job status``: print one job's or every job's state and progress; returns 0."""
    rows = asyncio.run(_with_analyst(args, lambda stub: job_status(stub, args.job_id)))
    if args.json:
        print(json.dumps(rows if not args.job_id else rows[0], indent=2))
        return 0
    for st in rows:
        left = st["close_at"] - time.time()
        extra = (f", closes in ≤ {left:.0f} s" if st["state"] == "running" and left > 0 else "")
        held = st["progress"].get("held_per_server")
        print(f"{st['job_id']}: {st['state']}" + (f" ({st['phase']})" if st["phase"] else "") + extra
              + (f"; clients held per server {held}" if held else "")
              + (f"; release sha256 {st['release_sha256']}" if st["release_sha256"] else "")
              + (f" — {st['error']}" if st["error"] else ""))
    return 0


def write_result(out: Path, job_id: str, files: dict[str, str]) -> Path:
    """Write one job's files into ``out/<job_id>/`` (created), so results of several jobs share one
    ``--out`` without overwriting each other; names from the analyst are checked (no directories, no
    dot files), and so is the job id (one directory name).  Returns the job's directory."""
    from ltm.identifiers import id_problem

    problem = id_problem(job_id, "job id")
    if problem:
        raise CommandError(problem)
    bad = [name for name in files if "/" in name or "\\" in name or name.startswith(".")]
    if bad:
        raise CommandError(f"refusing the file name {bad[0]!r} from the analyst")
    d = out / job_id
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)
    return d


def write_result_figure(d: Path) -> str:
    """Write the figure of the job in ``d`` (:mod:`ltm.analyst.figure`); returns the line to print: where
    it went, or why there is none (no matplotlib: the ``plot`` extra; a release no model fits, e.g. a
    singular one) — the job's files are written either way."""
    import numpy as np

    from ltm.analyst.figure import write_figure
    from ltm.analyst.result import open_result

    try:
        path = write_figure(open_result(d))
    except ImportError as exc:
        if not (exc.name or "").startswith("matplotlib"):
            raise
        return "  no figure: matplotlib is not installed (pip install 'ltm[plot]')"
    except (ValueError, np.linalg.LinAlgError) as exc:
        return f"  no figure: {' '.join(str(exc).split())}"
    return f"  figure: {path}"


def run_cancel(args: argparse.Namespace) -> int:
    """``ltm job cancel``: cancel a job that is not done; returns 0 when every server confirmed, 1
    when some could not be told (the line names them: run the command again)."""
    from ltm.v1 import ltm_pb2

    async def go(stub):
        return info_dict(await stub.Cancel(ltm_pb2.CancelRequest(job_id=args.job_id, reason=args.reason or ""),
                                           timeout=120.0))

    st = asyncio.run(_with_analyst(args, go))
    print(f"job {st['job_id']!r}: {st['state']} — {st['error']}")
    return 1 if "not yet told" in st["error"] else 0


def run_result(args: argparse.Namespace) -> int:
    """``ltm job result``: fetch a finished job's files into ``--out/<job id>/`` with its figure, and
    print the release hash and the model; returns 0.
    """
    sha, files = asyncio.run(_with_analyst(args, lambda stub: job_result(stub, args.job_id)))
    out = write_result(Path(args.out), args.job_id, files)
    model = json.loads(files.get("model.json", "{}"))
    print(f"job {args.job_id!r}: release sha256 {sha}; wrote {', '.join(sorted(files))} to {out}")
    if "coef" in model:
        coef = ", ".join(f"{k} {v:.4g}" for k, v in model["coef"].items())
        print(f"  {model['model']}: {model['target']} ≈ {model['intercept']:.4g} + {coef}")
    elif model:
        print(f"  {model['model']} (rank {model.get('rank')}) on columns {model.get('columns')}")
    print(write_result_figure(out))
    return 0

"""``ltm job bounds``: a DP pre-job that finds each column's centre and spread when nobody knows them.

The operator writes the main job file as usual but leaves out the transforms (range / center /
spread / scale) of the columns nobody has public bounds for: a *draft*.  ``ltm job bounds`` then
runs, over the same parties and servers and through the same shares and release gate, one or two
small jobs whose release is a per-column histogram (:mod:`ltm.histograms`):

1. ``<id>-bounds-1`` (``hist_log``): counts on a signed, coarse log-scale grid of raw values
   (two bins per decade, |x| from 0.01 to 10⁶) — finds the order of magnitude and a range;
2. ``<id>-bounds-2`` (``hist_lin``, with ``--rounds 2``, the default): counts on 32 equal bins
   over the range round 1 found — refines it.

From the last round's noisy counts the analyst takes, per column, the histogram's mean as the
centre and its standard deviation as the spread (:func:`ltm.histograms.mean_and_std`; the median
and a robust spread are reported too) and writes the main job file with ``center`` / ``spread``
for those columns and a ``[[privacy.prejob]]`` record of each pre-job (job id, digest, ε, δ) — so
the main job's spec states what its transforms cost.  (Mean centring keeps the model affine
without an intercept column, exactly as the demo's data-derived centring does; ``--intercept``
adds one anyway.)  ε and δ are split evenly between the
rounds; each party's ledger charges each pre-job like any job.  Everything here is public
information and DP releases: no command reads a party's data.
"""
from __future__ import annotations

import argparse
import asyncio
import copy
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ltm.errors import CommandError
from ltm.histograms import (
    HIST_CLIP_BOUND,
    LIN_BINS,
    counts_matrix,
    denoise,
    mean_and_std,
    quantiles,
    robust_centre_spread,
)
from ltm.jobfile import (
    DEFAULT_DEADLINE_S,
    JobFile,
    JobFileError,
    load_toml,
    parse_job_file,
    read_job_text,
    render_job_file,
)
from ltm.jobspec import INTERCEPT_NAME

_TRANSFORM_KEYS = ("range", "center", "spread", "scale")


@dataclass(frozen=True)
class Draft:
    """A main job file whose columns may lack a transform; ``unknown`` names those columns."""

    doc: dict[str, Any]
    unknown: tuple[str, ...]
    source: str = "draft"

    @staticmethod
    def parse(text: str, source: str = "draft") -> "Draft":
        """Read a draft job file: the job-file limits apply, every part but the unknown columns'
        transforms is validated now, and a draft with no column left to estimate is refused
        (:class:`~ltm.jobfile.JobFileError`).
        """
        doc = load_toml(text, source)  # the job-file limits: size and nesting before tomllib
        columns = doc.get("columns", [])
        unknown = tuple(c.get("name", "") for c in columns if isinstance(c, dict) and c.get("role") != "intercept"
                        and not any(k in c for k in _TRANSFORM_KEYS))
        draft = Draft(doc, unknown, source)
        draft.main_doc({n: (0.0, 1.0) for n in unknown}, [])  # validates everything else now
        if not unknown:
            raise JobFileError(["every column already has a public transform: there is nothing for the bounds "
                                "pre-job to estimate (leave out range/center/spread/scale where nobody knows them)"],
                               source)
        if doc.get("job", {}).get("partition", "rows") != "rows":
            raise JobFileError(["the bounds pre-job needs the rows partition (each client's whole row is "
                                "histogrammed by the party that holds it)"], source)
        return draft

    @property
    def job_id(self) -> str:
        """The main job's id as the draft gives it ("" when it gives none)."""
        return str(self.doc.get("job", {}).get("id", ""))

    def prejob_doc(self, round_: int, kind: str, transforms: dict[str, tuple[float, float]], epsilon: float,
                   delta: float) -> dict[str, Any]:
        """The job file of pre-job round ``round_``: the draft's parties and servers, one histogram
        column per unknown column with the given (center, scale)."""
        job = self.doc.get("job", {})
        privacy = self.doc.get("privacy", {})
        keep = {k: privacy[k] for k in ("t_prime", "corrupt_parties", "mechanism") if k in privacy}
        if keep.get("mechanism") == "laplace":
            delta = 0.0
        return {
            "job": {"id": f"{self.job_id}-bounds-{round_}", "partition": "rows", "clip_bound": HIST_CLIP_BOUND,
                    "deadline_s": float(job.get("deadline_s", DEFAULT_DEADLINE_S)),
                    # a reproduction draft (seeded parties) has reproduction pre-jobs
                    **({"reproduction": job["reproduction"]} if "reproduction" in job else {})},
            "release": {"kind": kind},
            "privacy": {"epsilon": epsilon, "delta": delta, **keep},
            "fit": {"model": "none"},
            "servers": copy.deepcopy(self.doc.get("servers", [])),
            "parties": copy.deepcopy(self.doc.get("parties", [])),
            "columns": [{"name": n, "center": transforms[n][0], "scale": transforms[n][1]} for n in self.unknown],
        }

    def main_doc(self, estimates: dict[str, tuple[float, float]], prejobs: list[dict[str, Any]],
                 intercept: bool = False) -> JobFile:
        """The main job with ``center``/``spread`` for the unknown columns, an intercept column (if
        asked and absent) and the pre-job records; validated."""
        return parse_job_file(render_job_file(self.filled_doc(estimates, prejobs, intercept)), source=self.source)

    def filled_doc(self, estimates: dict[str, tuple[float, float]], prejobs: list[dict[str, Any]],
                   intercept: bool = False) -> dict[str, Any]:
        """The main job document of :meth:`main_doc` (for writing out)."""
        doc = copy.deepcopy(self.doc)
        for c in doc.get("columns", []):
            if c.get("name") in estimates:
                c["center"], c["spread"] = (float(v) for v in estimates[c["name"]])
        if intercept and prejobs and not any(c.get("role") == "intercept" for c in doc.get("columns", [])):
            doc["columns"].append({"name": INTERCEPT_NAME, "role": "intercept"})
        if prejobs:
            doc.setdefault("privacy", {})["prejob"] = prejobs
        return doc


def noise_sd(privacy: dict[str, Any]) -> float:
    """The standard deviation of the noise on one released count, from a release's privacy report:
    every participant adds one draw of std ``sigma_client`` (Gaussian, or Laplace's Gamma
    difference) to every count, so √participants · σ_c — not ``sigma_release`` (√L · σ_c, the
    least noise the gate guarantees, which is smaller when L < participants)."""
    return math.sqrt(float(privacy["participants"])) * float(privacy["sigma_client"])


def round_estimates(kind: str, release_row: np.ndarray, names: tuple[str, ...],
                    transforms: dict[str, tuple[float, float]], sd: float = 0.0) -> dict[str, dict[str, float]]:
    """Per column: mean, standard deviation, median, a robust spread and the 0.5 %/99.5 % quantiles
    (raw units) from one round's release; bins under 4.5 noise standard deviations ``sd`` are
    treated as empty (:func:`ltm.histograms.denoise`)."""
    counts = denoise(counts_matrix(kind, release_row, len(names)), sd)
    out = {}
    for j, name in enumerate(names):
        center, scale = transforms[name]
        median, spread, lo, hi = robust_centre_spread(kind, counts[j], center, scale)
        mean, std = mean_and_std(kind, counts[j], center, scale)
        out[name] = {"median": median, "spread": spread, "q005": lo, "q995": hi, "mean": mean, "std": std,
                     "noisy_count": float(np.maximum(counts[j], 0).sum())}
    return out


def next_grid(est: dict[str, float]) -> tuple[float, float]:
    """The hist_lin (center, scale) that spreads LIN_BINS bins over a round's [q0.5 %, q99.5 %]."""
    lo, hi = est["q005"], est["q995"]
    width = hi - lo
    if not width > 0:
        width = max(abs(lo), 1.0) * 1e-3
    pad = 0.05 * width  # a margin so the extreme quantiles do not sit on the overflow bins
    return lo - pad, (width + 2 * pad) / LIN_BINS


def choose(est: dict[str, float]) -> tuple[float, float]:
    """A column's (center, spread) from its estimates: the histogram's mean and standard deviation
    (the robust spread if the standard deviation is degenerate)."""
    return est["mean"], est["std"] if est["std"] > 1e-12 * max(abs(est["mean"]), 1.0) else est["spread"]


async def run_bounds(stub, draft: Draft, *, epsilon: float, delta: float, rounds: int = 2,  # noqa: PLR0913 - the pre-job's keyword-only options, one per `ltm job bounds` flag
                     randomness: str = "", timeout: float | None = None, say=print,
                     intercept: bool = False) -> tuple[JobFile, dict]:
    """Run the pre-job rounds through the analyst (``stub``: an Analyst stub) and build the main job."""
    from ltm.analyst.operator import job_result, submit_job, wait_done

    if rounds not in (1, 2):
        raise ValueError("--rounds must be 1 or 2")
    eps_r, delta_r = epsilon / rounds, delta / rounds
    transforms = {n: (0.0, 1.0) for n in draft.unknown}
    records: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []
    estimates: dict[str, dict[str, float]] = {}
    for r, kind in enumerate(("hist_log", "hist_lin")[:rounds], start=1):
        if r == 2:
            transforms = {n: next_grid(estimates[n]) for n in draft.unknown}
        jf = parse_job_file(render_job_file(draft.prejob_doc(r, kind, transforms, eps_r, delta_r)),
                            source=f"{draft.source} (bounds round {r})")
        spec = jf.spec
        st = await submit_job(stub, jf, randomness)
        say(f"bounds round {r}/{rounds}: job {spec.job_id!r} ({kind}, ε={spec.privacy.epsilon:g}, "
            f"δ={spec.privacy.delta:g}) {st['state']}; parties join with: ltm party --job {spec.job_id} …")
        st = await wait_done(stub, spec.job_id, timeout or jf.deadline_s + 300.0)
        if st["state"] != "done":
            raise CommandError(f"bounds pre-job {spec.job_id!r} did not finish: {st['state']} {st.get('error', '')}")
        sha, files = await job_result(stub, spec.job_id)
        release = json.loads(files["release.json"])
        estimates = round_estimates(kind, np.asarray(release["matrix"][0]), draft.unknown, transforms,
                                    noise_sd(json.loads(files["privacy_report.json"])))
        records.append({"kind": "bounds", "job_id": spec.job_id, "digest": spec.digest,
                        "epsilon": spec.privacy.epsilon, "delta": spec.privacy.delta})
        history.append({"job_id": spec.job_id, "kind": kind, "release_sha256": sha, "estimates": estimates,
                        "participants": json.loads(files["report.json"])["participants"]})
    chosen = {n: choose(e) for n, e in estimates.items()}
    return draft.main_doc(chosen, records, intercept), {
        "rounds": history, "prejobs": records, "epsilon_total": epsilon, "delta_total": delta,
        "chosen": {n: {"center": c, "spread": v} for n, (c, v) in chosen.items()},
        "main_doc": draft.filled_doc(chosen, records, intercept)}


# ---------------------------------------------------------------------------- the command
def run_bounds_command(args: argparse.Namespace) -> int:
    """``ltm job bounds``: run the DP pre-job(s) on the analyst for the draft's columns without
    bounds, then write the main job file with the estimated centres and spreads; returns the exit
    status.
    """
    from ltm.analyst.operator import _with_analyst

    path = Path(args.draft)
    text = read_job_text(path)  # bounded read, UTF-8 checked
    draft = Draft.parse(text, str(path))
    if not args.epsilon > 0:
        raise CommandError("--epsilon must be > 0")
    quiet = (lambda *a, **k: None) if args.json else print
    main, info = asyncio.run(_with_analyst(args, lambda stub: run_bounds(
        stub, draft, epsilon=args.epsilon, delta=args.delta, rounds=args.rounds, randomness=args.randomness or "",
        timeout=args.timeout, say=quiet, intercept=args.intercept)))
    out = Path(args.out)
    header = (f"Main job written by `ltm job bounds` from {path.name}: the centres and spreads of "
              f"{', '.join(draft.unknown)} come from the DP pre-jobs recorded under [[privacy.prejob]] "
              f"(total ε={args.epsilon:g}, δ={args.delta:g}).")
    out.write_text(render_job_file(info.pop("main_doc"), header=header))
    if args.json:
        print(json.dumps({**info, "job_id": main.spec.job_id, "job_digest": main.spec.digest, "out": str(out)},
                         indent=2))
        return 0
    last = info["rounds"][-1]["estimates"]
    for name, e in last.items():
        c = info["chosen"][name]
        print(f"  {name:28s} centre {c['center']:.6g}  spread {c['spread']:.6g}  (median {e['median']:.6g}, "
              f"[0.5 %, 99.5 %] ≈ [{e['q005']:.6g}, {e['q995']:.6g}])")
    print(f"wrote {out} (job {main.spec.job_id!r}, digest {main.spec.digest[:16]}…); check it with "
          f"`ltm job check {out}` and submit it with `ltm job submit {out}`")
    return 0


__all__ = ["Draft", "run_bounds", "round_estimates", "next_grid", "quantiles"]

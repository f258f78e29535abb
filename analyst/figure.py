"""The one figure ``ltm job result`` writes beside a job's files (``figure.png``).

A regression job: its coefficients with DP error bars — each coefficient in standardised units (one
public scale of the feature moves the label by that many of its public scales, so features in
different units share one axis), with the 95 % range of the release's noise
(:meth:`ltm.analyst.models.ReleaseRidge.coef_errors`, a parametric bootstrap of the noise the release
states), and the raw-unit value written beside it.  A low-rank job: the release's spectrum, the kept
components marked, and the level the noise alone would reach.  Post-processing of the release only.

matplotlib is the ``plot`` extra: without it :func:`write_figure` raises ImportError, which
``ltm job result`` turns into a one-line note.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ltm.analyst.models import ReleaseLowRank, ReleaseRidge
from ltm.analyst.result import JobResult

__all__ = ["FIGURE_FILE", "write_figure"]

#: The figure's file name in a job's result directory.
FIGURE_FILE = "figure.png"
#: Two-sided 95 % normal quantile for the error bars.
Z95 = 1.959963984540054


def _title(result: JobResult, what: str) -> str:
    eps, delta = result.epsilon, result.delta
    privacy = f"ε = {eps:g}, δ = {delta:.0e}" if math.isfinite(eps) else "privacy report missing"
    return f"job {result.job_id}: {what}\n{result.release.kind} release of n = {result.release.n:,} rows, {privacy}"


def _coefficients(fig: Any, result: JobResult, draws: int) -> None:
    lam = result.model.get("lambda")
    model = ReleaseRidge(alpha=None if lam is None else float(lam)).fit(result)
    sd_raw, _ = model.coef_errors(draws=draws)
    rel = model.release_
    feats = [rel.columns.index(f) for f in model.feature_names_in_]
    per_scale = rel.scales[feats] / rel.scales[rel.label]  # raw → standardised coefficient
    coef, err = model.coef_ * per_scale, Z95 * sd_raw * per_scale
    names = list(model.feature_names_in_)
    ax = fig.add_subplot(1, 1, 1)
    y = np.arange(len(names))[::-1]
    ax.axvline(0.0, color="0.6", lw=0.8)
    ax.errorbar(coef, y, xerr=err, fmt="o", color="tab:blue", ecolor="tab:blue", capsize=4, ms=6)
    ax.set_yticks(y, names)
    ax.set_ylim(-0.6, len(names) - 0.4)
    span = float(np.max(np.abs(coef) + err)) or 1.0
    ax.set_xlim(-1.2 * span, 1.6 * span)  # room on the right for the raw values
    for yi, c, e, raw, sd in zip(y, coef, err, model.coef_, sd_raw):
        ax.annotate(f"{raw:.4g} ± {Z95 * sd:.2g}", (c + e, yi), xytext=(6, 0), textcoords="offset points",
                    va="center", fontsize=8, color="0.25")
    target = rel.columns[rel.label]
    ax.set_xlabel(f"standardised coefficient: change in {target} per change in the feature,\n"
                  "each in its public scale (the job's x' = (x − centre) / scale)\n"
                  "bars: 95 % range of the release's stated DP noise; beside each point: raw coefficient ± that range",
                  fontsize=8.5)
    ax.set_title(_title(result, f"{result.model.get('model', 'ridge')} of {target}, λ = {model.alpha_:.3g}"),
                 fontsize=10)
    ax.grid(axis="x", color="0.92")


def _spectrum(fig: Any, result: JobResult) -> None:
    rel = result.release
    rank = int(result.model.get("rank") or 2)
    model = ReleaseLowRank(n_components=min(rank, len(rel.columns))).fit(result)
    s = model.spectrum_
    ax = fig.add_subplot(1, 1, 1)
    idx = np.arange(1, len(s) + 1)
    colors = ["tab:blue" if i <= model.n_components else "0.7" for i in idx]
    ax.bar(idx, s, color=colors)
    if rel.kind == "gram":  # √ of the noise matrix's spectral edge 2√(D·v) (Wigner)
        level = math.sqrt(2.0 * math.sqrt(len(rel.columns) * float(rel.noise_variance_per_column)))
    else:  # σ_entry (√m + √D) for an m × D matrix of independent noise entries
        m = rel.matrix.shape[0]
        level = math.sqrt(rel.noise_variance_per_column / m) * (math.sqrt(m) + math.sqrt(len(rel.columns)))
    ax.axhline(level, color="tab:red", ls="--", lw=1, label="≈ the largest the DP noise alone would reach")
    ax.set_xticks(idx)
    ax.set_ylim(0.0, 1.2 * max(float(s.max()), level))  # headroom for the legend
    ax.set_xlabel(f"component (blue: the {model.n_components} kept)")
    ax.set_ylabel("singular value of the released data")
    ax.set_title(_title(result, f"low rank, spectrum of {len(rel.columns)} columns"), fontsize=10)
    ax.legend(loc="upper right", fontsize=8, framealpha=0.9)


def write_figure(result: JobResult, path: str | Path | None = None, *, draws: int = 200) -> Path:
    """Write the job's figure (PNG) to ``path`` (default: ``figure.png`` in the result's directory).

    A release with a label: coefficients with DP error bars (``draws`` noise draws); without: the
    spectrum.  Raises ImportError without matplotlib.  Returns the path written.
    """
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, nothing global

    path = Path(path) if path is not None else result.path / FIGURE_FILE
    labelled = result.release.label is not None
    rows = len(result.release.columns) if labelled else 0
    fig = Figure(figsize=(8.0, max(3.6, 1.6 + 0.45 * rows)), layout="constrained")
    if labelled:
        _coefficients(fig, result, draws)
    else:
        _spectrum(fig, result)
    fig.savefig(path, dpi=120)
    return path

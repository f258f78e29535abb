"""A finished job's result, opened from the files ``ltm job result`` writes (the analyst's Python surface).

``ltm job result ID --out DIR`` writes ``DIR/ID/``: ``release.json`` (the released sketch or Gram, its
columns, public centres and scales, and the noise it carries), ``privacy_report.json`` (ε, δ, the
mechanism and the noise statement), ``model.json`` (the fit the job asked for) and ``report.json``.
:func:`open_result` reads them back into a :class:`JobResult`; the estimators of
:mod:`ltm.analyst.models` fit from its :attr:`JobResult.release`.  Everything here is post-processing
of what was released: reading it, and fitting any number of models from it, costs no privacy.

    from ltm.analyst.result import open_result
    from ltm.analyst.models import ReleaseRidge

    result = open_result("results/power-ridge-1")
    model = ReleaseRidge(alpha=None).fit(result)      # the release's own λ rule
    model.predict(X_raw); model.score(X_raw, y_raw)
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ltm.analyst.release import ReleasedSketch, release_from_json

__all__ = ["RESULT_FILES", "JobResult", "noise_statement", "open_result"]

#: The files of one job's result directory (``ltm job result``; the analyst's ``<out>/<job id>/``).
RESULT_FILES = ("release.json", "privacy_report.json", "model.json", "report.json")


def noise_statement(release: ReleasedSketch) -> dict[str, Any]:
    """What the release states about the noise it carries, in its own coordinates.

    Returns a dict: ``kind`` (the release kind), ``mechanism`` (from the privacy report, "" if
    absent), ``noise_variance_per_column`` (a sketch: E[NᵀN]_cc of the scaled matrix; a lifted kind:
    the largest entry variance), for a sketch ``noise_variance_per_entry`` (that over m) and,
    for a lifted kind, ``entry_noise_variance`` (W,) as a list (a ``gram`` release: one variance per
    entry of the upper triangle of ZᵀZ).
    """
    out: dict[str, Any] = {"kind": release.kind, "mechanism": str(release.privacy.get("mechanism", "")),
                           "noise_variance_per_column": float(release.noise_variance_per_column)}
    if not release.lifted:  # a sketch: every entry of the (m, D) matrix carries the same variance
        out["noise_variance_per_entry"] = float(release.noise_variance_per_column) / release.matrix.shape[0]
    if release.entry_noise_variance is not None:
        out["entry_noise_variance"] = release.entry_noise_variance.tolist()
    return out


@dataclass(frozen=True)
class JobResult:
    """One finished job's result, as read from its directory.

    Attributes:
        job_id: the job's id (the directory's name, or the report's ``job_id``).
        path: the directory it was read from.
        release: the release (:class:`ltm.analyst.release.ReleasedSketch`), its ``privacy`` the report.
        privacy: the privacy report (ε, δ, mechanism, calibration, the noise it adds).
        model: the fit the job asked for (``model.json``; ``{}`` if absent).
        report: the job's report (participants, timings, …; ``{}`` if absent).
    """

    job_id: str
    path: Path
    release: ReleasedSketch
    privacy: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def noise(self) -> dict[str, Any]:
        """The release's noise statement (:func:`noise_statement`)."""
        return noise_statement(self.release)

    @property
    def epsilon(self) -> float:
        """The ε the release was calibrated for (its privacy report's)."""
        return float(self.privacy.get("epsilon", float("nan")))

    @property
    def delta(self) -> float:
        """The δ the release was calibrated for (its privacy report's)."""
        return float(self.privacy.get("delta", float("nan")))


def _read_json(path: Path, required: bool) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise FileNotFoundError(f"{path} is missing: is {path.parent} a directory `ltm job result` wrote?")
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None


def open_result(path: str | os.PathLike[str]) -> JobResult:
    """Open the result directory of one job (``DIR/<job id>/`` as ``ltm job result`` writes it).

    Args:
        path: the job's directory, holding at least ``release.json``; ``privacy_report.json``,
            ``model.json`` and ``report.json`` are read when present.

    Raises:
        FileNotFoundError: no ``release.json`` there (the message names the path).
        ValueError: a file that is not JSON, or a release that does not parse.
    """
    d = Path(path)
    release_obj = _read_json(d / "release.json", True)
    privacy = _read_json(d / "privacy_report.json", False)
    report = _read_json(d / "report.json", False)
    release = release_from_json(release_obj, privacy)
    return JobResult(job_id=str(report.get("job_id") or d.name), path=d, release=release, privacy=privacy,
                     model=_read_json(d / "model.json", False), report=report)

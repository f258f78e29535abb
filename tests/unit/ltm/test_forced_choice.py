"""A job file that forces its release choice: `ltm job check` warns when the forced choice predicts
an R² far below the planner's (ltm.planner.compare_forced, FAR_BELOW_FRACTION); the examples use
"auto" or say why not; a replicated job cannot carry an aggregated upload mode unnoticed."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from ltm.cli.app import main
from ltm.jobfile import JobFileError, forced_choice_warning, parse_job_file
from ltm.planner import FAR_BELOW_FRACTION

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "jobs"
RIDGE = (EXAMPLES / "power-ridge.toml").read_text()


def _release(text: str, release: str) -> str:
    """The example with its [release] table replaced by ``release``."""
    return re.sub(r"\[release\]\n(?:(?!\[).*\n)*", f"[release]\n{release}\n\n", text, count=1)


def test_a_forced_sketch_far_below_the_planner_is_warned(tmp_path, capsys):
    forced = tmp_path / "forced.toml"
    forced.write_text(_release(RIDGE, 'kind = "sparse"\nm = 64\ns = 1'))
    assert main(["job", "check", str(forced)]) == 0
    [line] = [ln for ln in capsys.readouterr().out.splitlines() if "warning:" in ln]
    got, planned = (float(x) for x in re.findall(r"R² ≈ ([0-9.]+)", line))
    assert "sparse m = 64" in line and "planner's choice (gram" in line
    assert got < FAR_BELOW_FRACTION * planned  # what "far below" means (docs/planner.md)


@pytest.mark.parametrize("release", ['kind = "auto"', 'kind = "gram"'])
def test_the_planner_s_own_choice_is_not_warned(release):
    jf = parse_job_file(_release(RIDGE, release))
    assert jf.spec.sketch.kind == "gram" and forced_choice_warning(jf) == ""


def test_the_threshold_separates_a_near_choice_from_a_far_one():
    # sweep the forced m: the warning appears exactly when the forced prediction falls below 0.8×
    from ltm.jobfile import _plan_inputs
    from ltm.planner import compare_forced

    seen = set()
    for m in (32, 64, 78, 128, 512):
        jf = parse_job_file(_release(RIDGE, f'kind = "sparse"\nm = {m}'))
        c = compare_forced(_plan_inputs(jf.spec, True), "sparse", m, 1)
        far = c.predicted_r2 is None or c.predicted_r2 < FAR_BELOW_FRACTION * c.planned_r2
        assert bool(forced_choice_warning(jf)) == far
        seen.add(far)
    assert seen == {True}  # at this n and ε every sketch is far below the gram release


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_every_example_uses_auto_or_says_why_not(path, capsys):
    text = path.read_text()
    kind = tomllib.loads(text).get("release", {}).get("kind", "auto")
    if kind != "auto":
        line = next(ln for ln in text.splitlines() if ln.startswith("kind ="))
        assert "#" in line and '"auto"' in text.split("[release]", 1)[1].split("[", 1)[0], line
    assert main(["job", "check", str(path)]) == 0
    assert "warning:" not in capsys.readouterr().out


def test_a_replicated_job_refuses_an_aggregated_upload_mode():
    text = (EXAMPLES / "power-columns-replicated.toml").read_text()
    with pytest.raises(JobFileError, match="upload_mode 'aggregate' does not apply to the replicated release"):
        parse_job_file(text.replace("deadline_s = 300", 'deadline_s = 300\nupload_mode = "aggregate"', 1))
    # auto (or nothing) resolves to the replicated release's own per-client upload, also when the
    # planner is the one that chose the replicated release
    auto = _release(text, 'kind = "auto"')
    assert parse_job_file(auto).spec.replicated and parse_job_file(auto).spec.upload_mode == "per-client"

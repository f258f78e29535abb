"""The release artifact: the sdist and wheel build from the repository's files, and the wheel alone,
installed in a fresh virtualenv, runs ``ltm demo --json`` from outside the checkout.

How the fresh environment gets the dependencies, and why: CI and developers' machines reach the
package index, but downloading numpy, grpcio, cryptography, … on every run would make the test slow
and dependent on the network. So the fresh venv (no system site-packages, nothing of this
checkout) sees the dependencies *already installed* in the test's own environment through a
directory of links to each of them — every entry of the running interpreter's site-packages except
the project's own (its dist-info, its editable-install hook, its packages). Then
``pip install --no-index <wheel>`` (with dependency resolution, not ``--no-deps``) must find every
requirement the wheel declares among those, or fail: the wheel's metadata is checked, not assumed.
The demo then runs from a temporary directory, and the test checks that the code it ran is the
installed wheel's, not the checkout's.
"""
from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.helpers.optional import require

ROOT = Path(__file__).resolve().parents[2]
#: The one top-level package of the wheel, and the folders of its subpackages inside it.
PROJECT_PACKAGES = ("ltm",)
SUBPACKAGES = ("cli", "party", "server", "analyst", "sim", "datasets", "experiments", "transport")


def _source_copy(dest: Path) -> Path:
    """The files a clean checkout of this tree would have (tracked, plus new files not ignored)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"needs a git checkout to know the repository's files: {exc}")
    for name in filter(None, listed.decode().split("\0")):
        src = ROOT / name
        if src.is_file():  # a file deleted in the work tree but still tracked is not shipped
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _is_project_entry(name: str) -> bool:
    lower = name.lower()
    return (lower.split(".")[0] in PROJECT_PACKAGES or lower.startswith("ltm-")
            or (lower.startswith("__editable__") and "ltm" in lower))


def _dependencies_dir(dest: Path) -> Path:
    """Links to every installed distribution of this interpreter except the project itself."""
    dest.mkdir()
    for sp in map(Path, site.getsitepackages()):
        if not sp.is_dir():
            continue
        for entry in sp.iterdir():
            if not _is_project_entry(entry.name) and not entry.name.endswith(".pth") \
                    and not (dest / entry.name).exists():
                (dest / entry.name).symlink_to(entry)
    return dest


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> dict[str, Path]:
    require("build")
    tmp = tmp_path_factory.mktemp("release")
    src = _source_copy(tmp / "src")
    dist = tmp / "dist"
    # sdist first, then the wheel built FROM the sdist (build's default): a file missing from the
    # sdist is missing from the wheel too, and fails here. --no-isolation: the backend is the dev
    # extra's setuptools, nothing is downloaded.
    r = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    wheels, sdists = sorted(dist.glob("ltm-*.whl")), sorted(dist.glob("ltm-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in dist.iterdir())
    return {"tmp": tmp, "wheel": wheels[0], "sdist": sdists[0], "log": r.stdout + r.stderr}


def test_the_build_has_no_deprecated_metadata(artifacts):
    # e.g. `project.license` as a table (setuptools stops reading it in 2027): the SPDX string form
    assert "deprecated" not in artifacts["log"].lower(), artifacts["log"][-3000:]


def test_the_wheel_carries_the_package_data(artifacts):
    names = set(zipfile.ZipFile(artifacts["wheel"]).namelist())
    for pkg in SUBPACKAGES:
        assert f"ltm/{pkg}/__init__.py" in names, pkg
    # one namespace: nothing but ltm/ and its .dist-info at the top of the wheel
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"ltm"}
    assert "ltm/v1/ltm_pb2.py" in names  # the committed gRPC stubs
    # the bundled data (the demo's and the experiments') with its provenance, and every experiment spec
    for pattern in ("ltm/datasets/data/*.csv", "ltm/datasets/data/README.md", "ltm/experiments/specs/*.toml"):
        expected = {p.relative_to(ROOT).as_posix() for p in ROOT.glob(pattern)}
        assert expected and expected <= names, (pattern, sorted(expected - names))
    assert not any(n.startswith(("tests/", "deploy/")) for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "ltm = ltm.cli.app:entry" in zipfile.ZipFile(artifacts["wheel"]).read(entry_points).decode()


def test_the_sdist_carries_what_a_host_needs(artifacts):
    with tarfile.open(artifacts["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for rel in ("examples/jobs/power-ridge.toml", "deploy/README.md", "deploy/Dockerfile",
                *(p.relative_to(ROOT).as_posix() for p in (ROOT / "deploy" / "systemd").iterdir()),
                *(p.relative_to(ROOT).as_posix() for p in (ROOT / "deploy" / "nftables").iterdir())):
        assert rel in names, rel
    assert not [n for n in names if n.endswith((".key", ".csr")) or "wheelhouse/" in n]


def test_the_wheel_alone_runs_the_demo_in_a_fresh_venv(artifacts):
    tmp = artifacts["tmp"]
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    deps = _dependencies_dir(tmp / "deps")
    (Path(purelib) / "ltm_test_dependencies.pth").write_text(f"{deps}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    env["PIP_NO_INDEX"] = "1"
    outside = tmp / "elsewhere"
    outside.mkdir()
    before = subprocess.run([str(py), "-c", "import ltm"], cwd=outside, env=env, capture_output=True, text=True)
    assert before.returncode != 0, "the fresh venv must not see the project before the wheel is installed"
    # pip comes from the dependencies (it is one of them); resolving, not --no-deps
    r = subprocess.run([str(py), "-m", "pip", "install", "--no-index", "--no-cache-dir", str(artifacts["wheel"])],
                       cwd=outside, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    where = subprocess.run([str(py), "-c", "import ltm, ltm.sim.localnet.demo, ltm.server; print(ltm.__file__); "
                                           "print(ltm.sim.localnet.demo.__file__); print(ltm.server.__file__)"],
                           cwd=outside, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert all(Path(w).is_relative_to(venv) for w in where), where
    # the actors live under ltm.*: a user's own `server` or `party` module is never shadowed by ours
    for name in ("server", "party", "analyst", "transport", "sim", "experiments", "ltm_cli", "ltm_datasets"):
        gone = subprocess.run([str(py), "-c", f"import {name}"], cwd=outside, env=env, capture_output=True, text=True)
        assert gone.returncode != 0, f"the wheel installed a top-level {name!r}"
    ltm_bin = venv / "bin" / "ltm"
    assert ltm_bin.is_file()
    r = subprocess.run([str(ltm_bin), "demo", "--json"], cwd=outside, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = json.loads(r.stdout)
    assert report["command"] == "demo" and report["tls"] is True
    assert len(report["release_sha256"]) == 64 and report["metrics"]["r2"] == report["metrics"]["r2"]
    assert {p["role"] for p in report["processes"]} == {"server", "analyst", "party"}

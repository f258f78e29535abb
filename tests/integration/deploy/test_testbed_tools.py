"""deploy/testbed.sh with a Docker engine that answers but lacks compose and mmdebstrap: it installs
them (as root) or names them in one line (not root), never dies with "command not found" (rc 127).

Fast: every outside command the script reaches (docker, apt-get, id, mmdebstrap) is a stub in a
directory put first on PATH, so nothing is installed and no container runs; the mmdebstrap the
stub apt-get "installs" stops the script with a status of its own once the tools are in place.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MMDEBSTRAP_STATUS = 42  # the stub mmdebstrap's: the script got as far as building the base image


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(0o755)


@pytest.fixture
def stubs(tmp_path) -> Path:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    # an engine that answers, with no compose plugin and no registry
    _stub(bin_ / "docker", 'case "$1" in info) exit 0;; compose) exit 1;; version) echo 99;; *) exit 1;; esac')
    # apt-get records what it is asked and "installs" stubs of the packages named
    _stub(bin_ / "apt-get", f'echo "$@" >> {tmp_path}/apt.log\n'
                            f'for p in "$@"; do case "$p" in\n'
                            f'  docker-compose) printf "#!/bin/bash\\nexit 0\\n" > {bin_}/docker-compose; '
                            f'chmod +x {bin_}/docker-compose;;\n'
                            f'  mmdebstrap) printf "#!/bin/bash\\nexit {MMDEBSTRAP_STATUS}\\n" > {bin_}/mmdebstrap; '
                            f'chmod +x {bin_}/mmdebstrap;;\n'
                            f'esac; done')
    return bin_


def _run(tmp_path: Path, bin_: Path, uid: int) -> subprocess.CompletedProcess:
    _stub(bin_ / "id", f'[ "$1" = -u ] && echo {uid} || /usr/bin/id "$@"')
    # the stubs shadow the real docker, apt-get and id; a real docker-compose or mmdebstrap would not
    # be missing, so this host cannot show the case
    path = [str(bin_), *os.environ["PATH"].split(os.pathsep)]
    if any((Path(d) / t).exists() for d in path[1:] for t in ("docker-compose", "mmdebstrap")):
        pytest.skip("this host has docker-compose or mmdebstrap installed")
    return subprocess.run(["bash", str(ROOT / "deploy" / "testbed.sh")], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PATH": os.pathsep.join(path),
                                           "LTM_TESTBED_DIR": str(tmp_path / "work"),
                                           "LTM_TESTBED_PROJECT": "ltm-testbed-stub"})


def test_root_installs_compose_and_mmdebstrap_although_an_engine_answers(tmp_path, stubs):
    r = _run(tmp_path, stubs, uid=0)
    assert r.returncode == MMDEBSTRAP_STATUS, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "command not found" not in r.stderr, r.stderr[-2000:]
    installs = [line.split() for line in (tmp_path / "apt.log").read_text().splitlines() if "install" in line]
    assert [p for line in installs for p in line if not p.startswith("-") and p != "install"] == \
        ["docker-compose", "mmdebstrap"]


def test_not_root_names_the_missing_tools_in_one_line(tmp_path, stubs):
    r = _run(tmp_path, stubs, uid=1000)
    assert r.returncode == 3, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("testbed.sh: ") and "docker-compose" in lines[0], r.stderr
    assert not (tmp_path / "apt.log").exists()

"""deploy/testbed.sh for real: build the image, run the compose testbed, compare with `ltm demo`.

Slow (minutes: an image build and a whole job in containers), so excluded from CI; it runs when a
Docker engine answers, or as root where deploy/testbed.sh can install and start one itself.
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def engine_available() -> bool:
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        return True
    return os.geteuid() == 0 and shutil.which("dockerd") is not None


@pytest.mark.slow
@pytest.mark.skipif(not engine_available(), reason="no Docker engine (and not root with dockerd installed)")
def test_testbed_releases_what_ltm_demo_releases():
    r = subprocess.run(["bash", str(ROOT / "deploy" / "testbed.sh"), "--seed", "7"], cwd=ROOT,
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = dict(l.split(" release_sha256 ", 1) for l in r.stdout.splitlines() if " release_sha256 " in l)
    compose = lines["testbed: compose "].split()[0]
    demo = lines["testbed: ltm demo"].split()[0]
    assert compose == demo and len(compose) == 64
    assert "no container can read ca.key" in r.stdout

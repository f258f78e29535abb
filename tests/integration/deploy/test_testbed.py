"""deploy/testbed.sh for real: build the image, run the compose testbed, compare with `ltm demo`.

Slow (minutes: an image build, a whole job in containers, connection probes between them), so
excluded from CI; it runs when a Docker engine answers, or as root where deploy/testbed.sh can
install and start one itself.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def engine_available() -> bool:
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        return True
    return os.geteuid() == 0 and shutil.which("dockerd") is not None


@pytest.mark.slow
@pytest.mark.skipif(not engine_available(), reason="no Docker engine (and not root with dockerd installed)")
@pytest.mark.parametrize("extra", [[], ["--columns"]], ids=["rows", "columns"])
def test_testbed_releases_what_ltm_demo_releases(extra):
    # PYTHON: the wheelhouse and `ltm demo` use this interpreter's packages (a system python3
    # may lack them, or pin other versions).  --columns: the replicated release (deploy/compose.columns.yml)
    r = subprocess.run(["bash", str(ROOT / "deploy" / "testbed.sh"), "--seed", "7", *extra], cwd=ROOT,
                       capture_output=True, text=True, timeout=1800, env={**os.environ, "PYTHON": sys.executable})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = dict(l.split(" release_sha256 ", 1) for l in r.stdout.splitlines() if " release_sha256 " in l)
    compose = lines["testbed: compose "].split()[0]
    demo = lines["testbed: ltm demo"].split()[0]
    assert compose == demo and len(compose) == 64
    assert "no container can read ca.key" in r.stdout
    # who reaches whom, probed from inside the actors' containers (deploy/testbed.sh prints it)
    (networks,) = [l for l in r.stdout.splitlines() if l.startswith("testbed: networks")]
    print(networks)
    assert networks.startswith("testbed: networks (as designed): ")
    for refused in ("party → party", "party → analyst", "server → server", "operator → servers"):
        assert refused in networks and f"{refused}: " in networks
        probes = networks.split(f"{refused}: ", 1)[1].split(";")[0]
        assert "open" not in probes, networks
    for reached in ("party → servers: 3 open", "analyst → servers: 3 open", "operator → analyst: 1 open"):
        assert reached in networks

"""`--ledger-dir` never silently makes a shared directory private: an existing directory that is
not the party's own (sticky or group/world-writable, e.g. a 1777 temp folder, or a link to one, or
another user's) is refused in one line; the party's own directory is made 0700 as before."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ltm.party.ledger import LedgerError, PrivacyLedger

REPO = Path(__file__).resolve().parents[3]


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.parametrize("mode", [0o1777, 0o777, 0o775, 0o770])
@pytest.mark.parametrize("via_link", [False, True])
def test_a_shared_directory_is_refused_and_left_as_it_is(tmp_path, mode, via_link):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    given = shared
    if via_link:
        given = tmp_path / "link"
        given.symlink_to(shared)
    with pytest.raises(LedgerError, match=f"shared directory \\(mode {mode:04o}\\)") as err:
        PrivacyLedger.open(given, "party-0")
    assert "\n" not in str(err.value) and ("a link to" in str(err.value)) == via_link
    assert _mode(shared) == mode and not any(shared.iterdir())


def test_the_party_s_own_directory_is_made_private(tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    os.chmod(own, 0o755)
    PrivacyLedger.open(own, "party-0")
    assert _mode(own) == 0o700
    PrivacyLedger.open(tmp_path / "new" / "ledger", "party-0")
    assert _mode(tmp_path / "new" / "ledger") == 0o700


def test_ltm_party_refuses_it_before_contacting_anyone(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    (tmp_path / "rows.csv").write_text("x0\n1\n")
    r = subprocess.run([sys.executable, "-m", "ltm.cli", "party", "--id", "party-0", "--servers", "127.0.0.1:1",
                        "--job", "j", "--data", str(tmp_path / "rows.csv"), "--insecure", "--ledger-dir", str(shared)],
                       capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 7 and len(lines) == 1, r.stderr
    assert lines[0].startswith("ltm party: error: privacy ledger: refusing the ledger directory")
    assert _mode(shared) == 0o1777

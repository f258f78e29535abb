"""Actor state is private by file mode: 0700 directories, 0600 files, whatever the umask."""
from __future__ import annotations

import os
import stat

import pytest

from ltm.transport.files import create_private, mode_problems, private_dir, touch_private, write_private


@pytest.fixture
def loose_umask():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_helpers_make_private_modes_under_a_loose_umask(tmp_path, loose_umask):
    d = private_dir(tmp_path / "a" / "b")
    assert _mode(tmp_path / "a") == 0o700 and _mode(d) == 0o700
    f = write_private(d / "x.json", "{}")
    assert _mode(f) == 0o600 and f.read_text() == "{}"
    write_private(f, b"[1]")  # replace keeps it private
    assert _mode(f) == 0o600 and f.read_bytes() == b"[1]"
    g = create_private(d / "marker", b"m")
    assert _mode(g) == 0o600 and g.read_bytes() == b"m"
    with pytest.raises(FileExistsError):
        create_private(g, b"other")
    assert g.read_bytes() == b"m"
    t = touch_private(d / "db")
    assert _mode(t) == 0o600
    assert mode_problems(tmp_path / "a") == []
    assert not [p for p in os.listdir(d) if p.endswith(".tmp")]


def test_private_dir_tightens_an_existing_directory_and_mode_problems_reports(tmp_path, loose_umask):
    d = tmp_path / "loose"
    d.mkdir(mode=0o755)
    (d / "f").write_text("x")
    os.chmod(d / "f", 0o644)
    probs = mode_problems(d)
    assert any("0755" in p for p in probs) and any("0644" in p for p in probs)
    private_dir(d)
    assert _mode(d) == 0o700
    assert [p for p in mode_problems(d) if "0644" in p]


def test_actor_state_is_private_server_store_analyst_store_party_journal(tmp_path, loose_umask):
    """Each actor's durable state, created under umask 022, holds nothing group/other-readable."""
    from ltm.analyst.store import AnalystStore
    from ltm.server.sqlite_store import SqliteStore

    store = SqliteStore(tmp_path / "server")
    store.close()
    analyst = AnalystStore(tmp_path / "analyst")
    analyst.close()
    for d in ("server", "analyst"):
        assert mode_problems(tmp_path / d) == [], mode_problems(tmp_path / d)
    loose = tmp_path / "loose-server"
    loose.mkdir(mode=0o755)
    SqliteStore(loose).close()  # an existing loose directory is tightened
    assert mode_problems(loose) == []

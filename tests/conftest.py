"""Suite-wide test configuration."""
# Import hypothesis's pretty-printer while the interpreter is in a clean state.  Otherwise the
# hypothesis plugin imports it lazily in pytest's terminal summary, after tests that ran asyncio
# and threads, where CPython 3.11.7's compile() (pytest rewrites plugin modules) can fail with
# "SystemError: AST constructor recursion depth mismatch" and turn a green run red.
try:
    import hypothesis.vendor.pretty  # noqa: F401
except ImportError:  # hypothesis is in the dev extra; the tests that need it skip without it
    pass

import pytest  # noqa: E402

from ltm.cli.app import no_grpc_fork_handlers  # noqa: E402

# The test process launches actors while its own channels are busy: as in `ltm`, before grpc is imported.
no_grpc_fork_handlers()


@pytest.fixture(autouse=True)
def _private_state_home(tmp_path_factory, monkeypatch):
    """Every test (and every process it starts) keeps per-host state — the parties' privacy ledgers,
    ``$XDG_STATE_HOME/ltm/ledger`` — in a directory of its own, never in the user's."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))

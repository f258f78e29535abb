"""Optional test dependencies: the tests that need one skip without it, each with the same reason text.

They are in the ``dev`` extra (``pip install -e '.[dev]'``), dask.distributed also in the ``dask`` extra; a
checkout without them still runs the rest of the suite.
"""
from __future__ import annotations

from types import ModuleType

import pytest

#: the distribution that installs a module, where the names differ
_DISTRIBUTIONS = {"yaml": "pyyaml", "grpc_tools": "grpcio-tools", "distributed": "dask.distributed"}
#: the extra that installs a module, where it is not the dev extra
_EXTRAS = {"distributed": "dask"}


def require(module: str) -> ModuleType:
    """``module`` imported, or the test skipped (the whole test module when called at its top level)
    with one line saying which extra installs it."""
    extra = _EXTRAS.get(module, "dev")
    return pytest.importorskip(module, reason=f"{_DISTRIBUTIONS.get(module, module)} is not installed "
                                              f"(the {extra} extra: pip install -e '.[{extra}]')")

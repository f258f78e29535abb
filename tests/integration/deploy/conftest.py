"""Fixtures of the deployment tests: deploy/k8s copied with its certificate bundles issued, and rendered."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of deploy/k8s with every overlay's certificate bundles issued."""
    from tests.helpers.k8s import issued_tree  # needs pyyaml: imported by the tests that use it

    return issued_tree(tmp_path_factory.mktemp("k8s"))


@pytest.fixture(scope="module")
def rendered(tree) -> dict[str, list[dict]]:
    """Every overlay of ``tree`` rendered: overlay → its objects."""
    from tests.helpers.k8s import render_overlays

    return render_overlays(tree)


@pytest.fixture(scope="module")
def objects(rendered) -> list[dict]:
    """The local overlay's objects."""
    return rendered["local"]

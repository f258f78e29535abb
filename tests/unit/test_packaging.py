"""One namespace: pyproject lists every package folder of the repository under ``ltm.*``, and nothing else.

The wheel's package list is explicit (the actor folders install as ``ltm.party``, ``ltm.server`` and
``ltm.analyst`` through ``package-dir``, which package discovery cannot see), so a new subpackage that is not
listed would be missing from the wheel: this test fails first.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def package_folders() -> dict[str, Path]:
    """Dotted name → folder, for every folder with an ``__init__.py`` under the mapped roots."""
    mapping = {"ltm": ROOT / "ltm", **{name: ROOT / folder for name, folder in _config()["package-dir"].items()}}
    found: dict[str, Path] = {}
    for name, base in mapping.items():
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            dotted = ".".join([name, *rel.parts])
            owner = max((m for m in mapping if dotted == m or dotted.startswith(m + ".")), key=len)
            if owner == name:  # ltm/… never shadows a mapped folder, and each folder is counted once
                found[dotted] = init.parent
    return found


def test_every_package_folder_is_listed_and_every_listed_package_exists() -> None:
    listed = set(_config()["packages"])
    folders = package_folders()
    assert {"ltm", "ltm.party", "ltm.server", "ltm.analyst", "ltm.cli", "ltm.sim.runtime"} <= set(folders)
    assert set(folders) - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - set(folders) == set(), "pyproject.toml lists packages that have no folder"


def test_one_top_level_name() -> None:
    assert {name.split(".")[0] for name in _config()["packages"]} == {"ltm"}
    assert all(name.startswith("ltm.") for name in _config()["package-dir"])
    # the repository keeps the top level the project was specified with
    for kept in ("party", "server", "analyst", "proto", "deploy", "tests", "docker-compose.yml", "pyproject.toml"):
        assert (ROOT / kept).exists(), kept
    for moved in ("sim", "transport", "ltm_cli", "ltm_datasets", "experiments", "cli"):
        assert not (ROOT / moved).exists(), f"{moved}/ belongs under ltm/"

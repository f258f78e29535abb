"""Real datasets, bundled in the package (``data/``; provenance and licences in ``data/README.md``).

Nothing is read from outside it.  :func:`load_bundled` is the default table of ``ltm simulate`` and
``ltm demo``; :func:`load_dataset` names the tables the experiments ask for by name.  The paper
reproductions that need their own preprocessing (``ltm.experiments.wu``, ``ltm.experiments.cao_zhang``,
``ltm.experiments.liao``) read their files from :data:`DATA_DIR`.
"""
from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

import numpy as np

from ltm.datasets.tables import DataError, Table, read_csv

#: The bundled data files (CSV) and their provenance README.
DATA_DIR = Path(__file__).resolve().parent / "data"
BUNDLED_FILES = ("household_power_sample100k_part1of2.csv", "household_power_sample100k_part2of2.csv")
BUNDLED_LABEL = "Sub_metering_3"
ROAD3D_FILE = "road_3d_first5000.csv"
ROAD3D_SHA256 = "ea4982d4aeb8fc5275a4be691f14d295c16cbddc4c2f70c8a82148275dc86651"


def load_bundled() -> Table:
    """The bundled real dataset (see data/README.md for provenance and licence)."""
    parts = [resources.files("ltm.datasets").joinpath("data", f).read_text(encoding="utf-8") for f in BUNDLED_FILES]
    # The second part repeats the header line; drop it before parsing the concatenation.
    text = parts[0] + "".join(p.split("\n", 1)[1] for p in parts[1:])
    return read_csv(text, source="bundled: UCI household power, 100k-row sample", label=BUNDLED_LABEL)


def load_road3d() -> Table:
    """UCI 3D Road Network, first 5000 rows (data/README.md): longitude, latitude → altitude."""
    path = DATA_DIR / ROAD3D_FILE
    raw = path.read_bytes()
    if hashlib.sha256(raw).hexdigest() != ROAD3D_SHA256:
        raise DataError(f"{path}: SHA-256 mismatch; the bundled file was modified")
    X = np.loadtxt(path, delimiter=",", dtype=np.float64)
    return Table({"longitude": X[:, 0], "latitude": X[:, 1], "altitude": X[:, 2]}, "altitude",
                 "UCI 3D road network, first 5000 rows (bundled)")


def load_power() -> Table:
    """UCI household power, the bundled 100k-row sample (:func:`load_bundled`): 6 features → Sub_metering_3."""
    return load_bundled()


DATASETS = {"power": load_power, "elevation": load_road3d}


def load_dataset(name: str) -> Table:
    """The real table called ``name`` (a key of :data:`DATASETS`)."""
    try:
        return DATASETS[name]()
    except KeyError:
        raise DataError(f"unknown dataset {name!r}; choose one of {sorted(DATASETS)}") from None


def features_only(table: Table) -> Table:
    """The table without its label (the low-rank experiments use the feature columns,
    Burkhardt et al. §6.2)."""
    return Table({c: v for c, v in table.columns.items() if c != table.label}, None, table.source + " (features)")

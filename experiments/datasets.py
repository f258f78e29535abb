"""Real datasets for the experiments (bundled in the repository; nothing is read from outside it)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from sim.data import DataError, Table, load_bundled

DATA_DIR = Path(__file__).resolve().parent / "data"
ROAD3D_FILE = "road_3d_first5000.csv"
ROAD3D_SHA256 = "ea4982d4aeb8fc5275a4be691f14d295c16cbddc4c2f70c8a82148275dc86651"


def load_road3d() -> Table:
    """UCI 3D Road Network, first 5000 rows (experiments/data/README.md): longitude, latitude → altitude."""
    path = DATA_DIR / ROAD3D_FILE
    raw = path.read_bytes()
    if hashlib.sha256(raw).hexdigest() != ROAD3D_SHA256:
        raise DataError(f"{path}: SHA-256 mismatch; the bundled file was modified")
    X = np.loadtxt(path, delimiter=",", dtype=np.float64)
    return Table({"longitude": X[:, 0], "latitude": X[:, 1], "altitude": X[:, 2]}, "altitude",
                 "UCI 3D road network, first 5000 rows (bundled)")


def load_power() -> Table:
    """UCI household power, the simulator's bundled 100k-row sample: 6 features → Sub_metering_3."""
    return load_bundled()


DATASETS = {"power": load_power, "elevation": load_road3d}


def load_dataset(name: str) -> Table:
    try:
        return DATASETS[name]()
    except KeyError:
        raise DataError(f"unknown dataset {name!r}; choose one of {sorted(DATASETS)}") from None


def features_only(table: Table) -> Table:
    """The table without its label (the low-rank experiments use the feature columns,
    Burkhardt et al. §6.2)."""
    return Table({c: v for c, v in table.columns.items() if c != table.label}, None, table.source + " (features)")

"""The data library: tables, synthetic generators and the bundled real datasets.

What the simulator (``ltm simulate``, ``ltm demo``), the measurement tools and the experiments all
read their data from; named like Flower's ``flwr_datasets`` (``datasets`` alone is the Hugging Face
package).

* :mod:`ltm.datasets.tables`: :class:`~ltm.datasets.tables.Table` (named float64 columns), reading
  CSV, :class:`~ltm.datasets.tables.ModelTable` (a dataset known by its moments) and the public
  column transforms of a job spec (:func:`~ltm.datasets.tables.public_columns`).
* :mod:`ltm.datasets.synthetic`: seeded synthetic tables (ridge, low rank, non-linear).
* :mod:`ltm.datasets.real`: the real datasets bundled in ``ltm/datasets/data/`` (provenance and
  licences in its ``README.md``), loaded by name.
"""

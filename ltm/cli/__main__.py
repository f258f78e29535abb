"""``python -m ltm.cli``: the ``ltm`` command."""
from ltm.cli.app import entry

entry()

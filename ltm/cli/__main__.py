"""``python -m ltm.cli``: the ``ltm`` command."""
import sys

from ltm.cli.app import main

sys.exit(main())

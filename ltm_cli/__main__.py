"""``python -m ltm_cli``: the ``ltm`` command."""
import sys

from ltm_cli.app import main

sys.exit(main())

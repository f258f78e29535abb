"""``python -m cli``: the ``ltm`` command."""
import sys

from cli.app import main

sys.exit(main())

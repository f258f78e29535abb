"""The ``ltm`` command line: :mod:`ltm.cli.app` assembles one module per command (``ltm/cli/<command>.py``)
and the option groups they share (:mod:`ltm.cli.options`).  Nothing in the core (``ltm/``) imports it."""

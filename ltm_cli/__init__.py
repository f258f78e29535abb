"""The ``ltm`` command line: :mod:`ltm_cli.app` assembles one module per command (``ltm_cli/<command>.py``)
and the option groups they share (:mod:`ltm_cli.options`).  Nothing in the core (``ltm/``) imports it."""

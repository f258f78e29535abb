"""The ``ltm`` command line: :mod:`cli.app` assembles one module per command (``cli/<command>.py``)
and the option groups they share (:mod:`cli.options`).  Nothing in the core (``ltm/``) imports it."""

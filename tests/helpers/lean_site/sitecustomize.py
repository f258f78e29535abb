"""Imported at start-up by every interpreter whose PYTHONPATH holds this directory (the demo's actor
processes too): makes the packages only the ``dev`` extra brings unimportable, and scipy unimportable
*from the project's own modules* (dp-accounting, a core dependency, imports scipy itself).  So a
command that runs here needs nothing beyond ``pip install -e .`` (tests/integration/test_demo_deps.py)."""
import sys

DEV_ONLY = ("pytest", "hypothesis", "matplotlib", "yaml", "dask", "distributed", "kubernetes_validate", "mutmut",
            "build", "grpc_tools")
PROJECT = ("ltm", "ltm.cli", "party", "server", "analyst", "sim", "ltm.datasets", "experiments", "transport")


class _Lean:
    def find_spec(self, fullname, path=None, target=None):
        top = fullname.split(".")[0]
        if top in DEV_ONLY:
            raise ImportError(f"{fullname} is a dev-only package (pip install -e '.[dev]')")
        if top == "scipy":
            frame = sys._getframe(1)
            while frame is not None and frame.f_globals.get("__name__", "").startswith(("importlib", "_frozen")):
                frame = frame.f_back
            caller = frame.f_globals.get("__name__", "") if frame is not None else ""
            if caller.split(".")[0] in PROJECT:
                raise ImportError(f"{caller} imports {fullname}: scipy is not a dependency of the project's core")
        return None


sys.meta_path.insert(0, _Lean())

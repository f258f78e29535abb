"""deploy/k8s as the tests see it: the overlays, deploy/k8s/render.py loaded as a module, a copy of the
tree with every overlay's certificate bundles issued, and the lookups the manifest tests share
(tests/integration/deploy/test_k8s.py and test_k8s_pods.py; the fixtures are in that folder's conftest.py).
render.py needs pyyaml: import this module after ``tests.helpers.optional.require("yaml")``."""
from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path

from ltm.transport.certs import write_bundles, write_certs

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
ACTORS = ["server-0", "server-1", "server-2", "analyst", "operator", "party-0", "party-1", "party-2", "party-3"]
PIECES = sorted(p.name for p in (K8S / "base").iterdir())  # one cross-cluster overlay per base piece
OVERLAYS = ["local"] + [f"cross-cluster/{p}" for p in PIECES]

_spec = importlib.util.spec_from_file_location("k8s_render", K8S / "render.py")
render = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render)


def piece_actors(piece: str) -> list[str]:
    """The actors whose bundles a piece's overlay holds (the analyst's organisation runs the operator)."""
    return ["analyst", "operator"] if piece == "analyst" else [piece]


def issue_bundles(root: Path) -> None:
    """The certificate bundles of every overlay in the deploy/k8s copy ``root`` (as the README says)."""
    ca = root.parent / "ca"
    write_certs(ca, ACTORS)
    write_bundles(ca, root / "overlays" / "local" / "bundles", ACTORS)
    for piece in PIECES:
        write_bundles(ca, root / "overlays" / "cross-cluster" / piece / "bundles", piece_actors(piece))


def issued_tree(parent: Path) -> Path:
    """A copy of deploy/k8s below ``parent`` with every overlay's certificate bundles issued."""
    root = parent / "k8s"
    shutil.copytree(K8S, root, ignore=shutil.ignore_patterns("bundles", "__pycache__"))
    issue_bundles(root)
    return root


def render_overlays(tree: Path) -> dict[str, list[dict]]:
    """Every overlay of ``tree`` rendered: overlay → its objects."""
    return {o: render.render(tree / "overlays" / o) for o in OVERLAYS}


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def workloads(objects: list[dict]) -> Iterator[tuple[dict, dict]]:
    """(object, pod spec) of every StatefulSet, Deployment and Job."""
    for o in objects:
        if o["kind"] in ("StatefulSet", "Deployment", "Job"):
            yield o, o["spec"]["template"]["spec"]


def env_of(objects: list[dict], ns: str, container: dict) -> dict[str, str]:
    """``container``'s environment in namespace ``ns``, its ConfigMap references resolved."""
    maps = {o["metadata"]["name"]: o["data"] for o in by_kind(objects, "ConfigMap") if o["metadata"]["namespace"] == ns}
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            ref = e["valueFrom"]["configMapKeyRef"]
            env[e["name"]] = maps[ref["name"]][ref["key"]]  # KeyError: a reference to nothing
    return env


def expand(words: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) expansion in args, then a probe's `sh -c` line with "$VAR" as sh would."""
    words = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], w) for w in words]
    if words[:2] == ["sh", "-c"]:
        line = re.sub(r"\$(\w+)", lambda m: env[m.group(1)], words[2])
        words = shlex.split(line)
        assert words[0] == "exec"
        words = words[1:]
    return words

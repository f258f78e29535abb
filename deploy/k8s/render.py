"""Render deploy/k8s kustomizations without kustomize: the small subset of kustomize they use.

CI (and many a laptop) has no ``kustomize`` or ``kubectl`` binary, and neither PyPI nor Debian
bookworm offers a current one, so the test suite renders the manifests with this module instead.
It implements exactly the kustomize features the files under deploy/k8s use, and refuses any
other field, so a manifest change that needs more fails loudly here rather than rendering wrong:

* ``resources``: YAML files (multi-document) and directories holding a kustomization;
* ``namespace``: set on every namespaced object of that kustomization (and the ones it includes);
* ``configMapGenerator`` (``literals``, ``files``) and ``secretGenerator`` (``files``), each with an
  optional ``namespace``; ``generatorOptions.disableNameSuffixHash: true`` is required (no hash
  suffixes, so no name references to rewrite);
* ``images``: ``name`` → ``newName``/``newTag``/``digest`` in every pod template's containers.

Where a real kustomize exists, tests/test_k8s.py checks that this renders the same objects
(``kubectl kustomize``).  Usage: ``python3 deploy/k8s/render.py deploy/k8s/overlays/local``.
"""
from __future__ import annotations

import base64
import copy
import sys
from pathlib import Path
from typing import Any

import yaml

KNOWN = {"apiVersion", "kind", "resources", "namespace", "configMapGenerator", "secretGenerator",
         "generatorOptions", "images"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "PersistentVolume", "StorageClass", "PriorityClass"}


class RenderError(ValueError):
    """A kustomization this renderer does not support (or that is wrong); the message names it."""


def _load_kustomization(directory: Path) -> dict[str, Any]:
    path = directory / "kustomization.yaml"
    if not path.is_file():
        raise RenderError(f"{directory}: no kustomization.yaml")
    k = yaml.safe_load(path.read_text()) or {}
    unknown = sorted(set(k) - KNOWN)
    if unknown:
        raise RenderError(f"{path}: fields {unknown} are not supported by deploy/k8s/render.py")
    return k


def _inside(root: Path, rel: str) -> Path:
    """kustomize's load restriction: a generator file must lie inside the kustomization's directory."""
    path = (root / rel).resolve()
    if root.resolve() not in path.parents:
        raise RenderError(f"{root}: {rel} is outside the kustomization directory")
    if not path.is_file():
        raise RenderError(f"{root}: {rel} does not exist")
    return path


def _generate(root: Path, k: dict[str, Any]) -> list[dict[str, Any]]:
    gens = k.get("configMapGenerator", []) + k.get("secretGenerator", [])
    if gens and not (k.get("generatorOptions") or {}).get("disableNameSuffixHash"):
        raise RenderError(f"{root}: generators need generatorOptions.disableNameSuffixHash: true here")
    out = []
    for kind, entries in (("ConfigMap", k.get("configMapGenerator", [])), ("Secret", k.get("secretGenerator", []))):
        for g in entries:
            extra = sorted(set(g) - {"name", "namespace", "literals", "files"})
            if extra:
                raise RenderError(f"{root}: {kind} generator fields {extra} are not supported")
            data: dict[str, str] = {}
            for lit in g.get("literals", []):
                key, sep, value = lit.partition("=")
                if not sep:
                    raise RenderError(f"{root}: literal {lit!r} is not key=value")
                data[key] = value
            for rel in g.get("files", []):
                data[Path(rel).name] = _inside(root, rel).read_text()
            obj: dict[str, Any] = {"apiVersion": "v1", "kind": kind, "metadata": {"name": g["name"]}}
            if "namespace" in g:
                obj["metadata"]["namespace"] = g["namespace"]
            if kind == "Secret":
                obj["type"] = "Opaque"
                obj["data"] = {key: base64.b64encode(v.encode()).decode() for key, v in data.items()}
            else:
                obj["data"] = data
            out.append(obj)
    return out


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    if obj["kind"] == "Pod":
        return [spec]
    if obj["kind"] == "CronJob":
        return [spec["jobTemplate"]["spec"]["template"]["spec"]]
    template = spec.get("template")
    return [template["spec"]] if isinstance(template, dict) and "spec" in template else []


def _image_name(ref: str) -> str:
    """``registry:5000/ltm:1.0@sha256:…`` → ``registry:5000/ltm``."""
    ref = ref.split("@")[0]
    head, _, last = ref.rpartition("/")
    last = last.split(":")[0]
    return f"{head}/{last}" if head else last


def _set_images(objs: list[dict[str, Any]], images: list[dict[str, Any]]) -> None:
    for rule in images:
        for obj in objs:
            for pod in _pod_specs(obj):
                for c in pod.get("containers", []) + pod.get("initContainers", []):
                    name = _image_name(c["image"])
                    if name != rule["name"]:
                        continue
                    image = rule.get("newName", name)
                    if "digest" in rule:
                        image += "@" + rule["digest"]
                    elif "newTag" in rule:
                        image += ":" + str(rule["newTag"])
                    c["image"] = image


def render(directory: str | Path) -> list[dict[str, Any]]:
    """Every object the kustomization in ``directory`` produces (the order is kustomize's input order)."""
    root = Path(directory)
    k = _load_kustomization(root)
    objs: list[dict[str, Any]] = []
    for res in k.get("resources", []):
        path = root / res
        if path.is_dir():
            objs += render(path)
        elif path.is_file():
            objs += [d for d in yaml.safe_load_all(path.read_text()) if d]
        else:
            raise RenderError(f"{root}: resource {res} does not exist")
    objs += _generate(root, k)
    objs = copy.deepcopy(objs)
    if "namespace" in k:
        for obj in objs:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = k["namespace"]
    _set_images(objs, k.get("images", []))
    seen = set()
    for obj in objs:
        key = (obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if key in seen:
            raise RenderError(f"{root}: {key} defined twice")
        seen.add(key)
    return objs


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: render.py KUSTOMIZATION_DIR", file=sys.stderr)
        return 2
    try:
        print(yaml.safe_dump_all(render(argv[0]), sort_keys=False), end="")
    except RenderError as exc:
        print(f"render.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

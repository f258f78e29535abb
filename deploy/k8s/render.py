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
* ``images``: ``name`` → ``newName``/``newTag``/``digest`` in every pod template's containers;
* ``components``: directories whose ``kind: Component`` kustomization adds its resources and runs
  its ``images`` and ``replacements`` over everything accumulated so far (kustomize's order:
  resources, then components, then the kustomization's own generators and transformers);
* ``replacements`` (inline): a source ``kind``/``name``/``fieldPath`` copied, scalar or whole
  list/map, into each target's ``select`` (``kind``, ``name``) ``fieldPaths``, with the options
  ``delimiter``/``index`` (replace one part of a string) and ``create``; field paths are dotted keys,
  list indices and ``[key.with.dots]``;
* objects annotated ``config.kubernetes.io/local-config: "true"`` feed replacements and are left out
  of the output.

Where a real kustomize exists, tests/integration/deploy/test_k8s.py checks that this renders the same objects
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
         "generatorOptions", "images", "components", "replacements"}
LOCAL_CONFIG = "config.kubernetes.io/local-config"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "PersistentVolume", "StorageClass", "PriorityClass"}


class RenderError(ValueError):
    """A kustomization this renderer does not support (or that is wrong); the message names it."""


def _load_kustomization(directory: Path, component: bool = False) -> dict[str, Any]:
    path = directory / "kustomization.yaml"
    if not path.is_file():
        raise RenderError(f"{directory}: no kustomization.yaml")
    k = yaml.safe_load(path.read_text()) or {}
    unknown = sorted(set(k) - KNOWN)
    if unknown:
        raise RenderError(f"{path}: fields {unknown} are not supported by deploy/k8s/render.py")
    if (k.get("kind") == "Component") != component:
        raise RenderError(f"{path}: kind {k.get('kind')!r} where a {'Component' if component else 'Kustomization'} "
                          f"is expected")
    if component and "namespace" in k:
        raise RenderError(f"{path}: a Component's namespace is not supported by deploy/k8s/render.py")
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


def _path(field_path: str) -> list[str | int]:
    """A field path's parts: ``spec.ingress.0.from`` → ``["spec", "ingress", 0, "from"]``,
    ``data.[job.toml]`` → ``["data", "job.toml"]``."""
    parts: list[str | int] = []
    rest = field_path
    while rest:
        if rest.startswith("["):
            key, sep, rest = rest[1:].partition("]")
            if not sep or "=" in key:
                raise RenderError(f"field path {field_path!r}: only [key] brackets are supported")
            parts.append(key)
            rest = rest.removeprefix(".")
        else:
            key, _, rest = rest.partition(".")
            parts.append(int(key) if key.isdigit() else key)
    return parts


def _get(obj: dict[str, Any], field_path: str) -> Any:
    node: Any = obj
    for part in _path(field_path):
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            raise RenderError(f"{obj['kind']}/{obj['metadata']['name']}: no field {field_path}") from None
    return node


def _set(obj: dict[str, Any], field_path: str, value: Any, options: dict[str, Any]) -> None:
    extra = sorted(set(options) - {"delimiter", "index", "create"})
    if extra:
        raise RenderError(f"replacement options {extra} are not supported")
    *parents, last = _path(field_path)
    node: Any = obj
    for part in parents:
        if isinstance(part, str) and isinstance(node, dict) and part not in node and options.get("create"):
            node[part] = {}
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            raise RenderError(f"{obj['kind']}/{obj['metadata']['name']}: no field {field_path}") from None
    if isinstance(last, int) and not (isinstance(node, list) and last < len(node)):
        raise RenderError(f"{obj['kind']}/{obj['metadata']['name']}: no field {field_path}")
    if isinstance(last, str) and last not in node and not options.get("create"):
        raise RenderError(f"{obj['kind']}/{obj['metadata']['name']}: no field {field_path} (and no create)")
    if "delimiter" in options:
        parts = str(node[last]).split(options["delimiter"])
        index = options.get("index", 0)
        if not (isinstance(value, str) and 0 <= index < len(parts)):
            raise RenderError(f"{obj['kind']}/{obj['metadata']['name']}: {field_path} has no part {index} "
                              f"split by {options['delimiter']!r} (or the value is not a string)")
        parts[index] = value
        value = options["delimiter"].join(parts)
    node[last] = copy.deepcopy(value)


def _replace(root: Path, objs: list[dict[str, Any]], replacements: list[dict[str, Any]]) -> None:
    """kustomize's ReplacementTransformer, for the fields listed in the module docstring."""
    for r in replacements:
        if set(r) != {"source", "targets"} or set(r["source"]) != {"kind", "name", "fieldPath"}:
            raise RenderError(f"{root}: a replacement needs source: {{kind, name, fieldPath}} and targets only")
        src = r["source"]
        found = [o for o in objs if o["kind"] == src["kind"] and o["metadata"]["name"] == src["name"]]
        if len(found) != 1:
            raise RenderError(f"{root}: replacement source {src['kind']}/{src['name']} matches {len(found)} objects")
        value = _get(found[0], src["fieldPath"])
        for target in r["targets"]:
            select = target.get("select", {})
            if set(target) - {"select", "fieldPaths", "options"} or set(select) != {"kind", "name"}:
                raise RenderError(f"{root}: a replacement target needs select: {{kind, name}}, fieldPaths, options")
            hits = [o for o in objs if o["kind"] == select["kind"] and o["metadata"]["name"] == select["name"]]
            if not hits:
                raise RenderError(f"{root}: replacement target {select['kind']}/{select['name']} matches nothing")
            for obj in hits:
                for field_path in target["fieldPaths"]:
                    _set(obj, field_path, value, target.get("options", {}))


def _build(root: Path, objs: list[dict[str, Any]], component: bool = False) -> list[dict[str, Any]]:
    """``objs`` (a Component's parent's objects so far) plus what the kustomization in ``root`` adds,
    with its transformers run over all of them."""
    k = _load_kustomization(root, component)
    objs = list(objs)
    for res in k.get("resources", []):
        path = root / res
        if path.is_dir():
            objs += _build(path, [])
        elif path.is_file():
            objs += [d for d in yaml.safe_load_all(path.read_text()) if d]
        else:
            raise RenderError(f"{root}: resource {res} does not exist")
    for comp in k.get("components", []):
        objs = _build(root / comp, objs, component=True)
    objs += _generate(root, k)
    objs = copy.deepcopy(objs)
    if "namespace" in k:
        for obj in objs:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = k["namespace"]
    _set_images(objs, k.get("images", []))
    _replace(root, objs, k.get("replacements", []))
    return objs


def render(directory: str | Path) -> list[dict[str, Any]]:
    """Every object the kustomization in ``directory`` produces (the order is kustomize's input order)."""
    root = Path(directory)
    objs = [o for o in _build(root, [])
            if (o["metadata"].get("annotations") or {}).get(LOCAL_CONFIG) != "true"]
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

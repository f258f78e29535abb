"""deploy/k8s: every rendered manifest is valid against the Kubernetes schemas, runs a valid `ltm`
command with its own certificates, and the NetworkPolicies allow exactly what each role needs; the
cross-cluster pieces take what they share from one file, and each overlay sets its image once.
(Pod Security and the data-loading path: tests/integration/deploy/test_k8s_pods.py.)

The kustomizations are rendered by deploy/k8s/render.py (the subset of kustomize they use; no
kustomize binary is needed, none being on PyPI or in Debian bookworm); where `kubectl` or
`kustomize` is installed, the real kustomize must render the same objects.  Schemas: the
`kubernetes-validate` package (pinned in the dev extra), strict mode, at K8S_VERSION.
"""
from __future__ import annotations

import base64
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.optional import require

yaml = require("yaml")

from ltm.cli.app import build_parser  # noqa: E402
from tests.helpers.k8s import (  # noqa: E402
    ACTORS,
    K8S,
    OVERLAYS,
    PIECES,
    ROOT,
    by_kind,
    env_of,
    expand,
    piece_actors,
    render,
    workloads,
)

K8S_VERSION = "1.32.0"  # the Kubernetes API the manifests target (schemas from kubernetes-validate)
CROSS = K8S / "overlays" / "cross-cluster"


def key(obj: dict) -> tuple[str, str | None, str]:
    return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


def test_every_manifest_is_valid_against_the_kubernetes_schemas(rendered):
    import kubernetes_validate as kv  # in the dev extra: a missing install fails, it does not skip

    assert len(rendered["local"]) > 40 and set(rendered) == set(OVERLAYS)
    for overlay, objects in rendered.items():
        assert objects, overlay
        for obj in objects:
            kv.validate(obj, K8S_VERSION, strict=True)  # raises ValidationError naming the field


@pytest.mark.parametrize("piece", PIECES)
def test_each_cross_cluster_piece_is_one_organisations_namespace(rendered, piece):
    """Applied alone in its organisation's cluster: one namespace, all of its objects in it, nothing
    of kustomize's local configuration (deployment.yaml) among them."""
    objs = rendered[f"cross-cluster/{piece}"]
    (ns,) = by_kind(objs, "Namespace")
    assert {o["metadata"].get("namespace") for o in objs if o["kind"] != "Namespace"} == {ns["metadata"]["name"]}
    assert not [o for o in objs if o["kind"] == "LtmDeployment"]
    secrets = {s["metadata"]["name"]: s["data"] for s in by_kind(objs, "Secret")}
    assert sorted(secrets) == (["ltm-certs-analyst", "ltm-certs-operator"] if piece == "analyst" else ["ltm-certs"])
    actors = set()
    for o, c, argv in ltm_commands(objs):  # valid commands, each with its own actor's bundle only
        assert callable(build_parser(argv[0]).parse_args(argv).func)
        actor = identity(argv)
        mount = next(m for m in c["volumeMounts"] if m["mountPath"] == "/certs")
        vol = next(v for v in o["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
        assert sorted(secrets[vol["secret"]["secretName"]]) == sorted(["ca.pem", f"{actor}.pem", f"{actor}.key"])
        actors.add(actor)
    assert sorted(actors) == sorted(piece_actors(piece))


@pytest.mark.parametrize("piece", sorted(p.name for p in (K8S / "base").iterdir()))
def test_each_operator_can_apply_its_piece_alone(piece):
    """Distrusting operators (or clusters) apply only their own directory: it renders on its own."""
    objs = render.render(K8S / "base" / piece)
    namespaces = {o["metadata"]["name"] for o in by_kind(objs, "Namespace")}
    assert len(namespaces) == 1
    assert {o["metadata"].get("namespace") for o in objs if o["kind"] != "Namespace"} == namespaces


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_renderer_agrees_with_kustomize(tree, rendered, overlay):
    for cmd in (["kustomize", "build"], ["kubectl", "kustomize"]):
        if shutil.which(cmd[0]):
            break
    else:
        pytest.skip("no kustomize or kubectl here: deploy/k8s/render.py alone renders the manifests")
    objects = rendered[overlay]
    out = subprocess.run([*cmd, str(tree / "overlays" / overlay)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr

    def norm(o):
        if o["kind"] == "Secret":  # kustomize wraps base64 lines
            o = {**o, "data": {k: base64.b64decode("".join(v.split())) for k, v in o["data"].items()}}
        return o

    real = {key(o): norm(o) for o in yaml.safe_load_all(out.stdout) if o}
    mine = {key(o): norm(o) for o in objects}
    assert mine == real


# ---------------------------------------------------------------------------- commands and certificates
def ltm_commands(objects):
    """(workload, container, argv without the leading `ltm`) for every command and probe."""
    for o, pod in workloads(objects):
        for c in pod["containers"]:
            env = env_of(objects, o["metadata"]["namespace"], c)
            assert "command" not in c, "the image's entrypoint is ltm"
            yield o, c, expand(c["args"], env)
            for probe in ("readinessProbe", "livenessProbe"):
                if "exec" in c.get(probe, {}):
                    argv = expand(c[probe]["exec"]["command"], env)
                    assert argv[0] == "ltm"
                    yield o, c, argv[1:]


def identity(argv: list[str]) -> str:
    if "--as" in argv:
        return argv[argv.index("--as") + 1]
    if "--id" in argv:
        return argv[argv.index("--id") + 1]
    return {"analyst": "analyst", "job": "operator"}[argv[0]]


def test_every_rendered_command_is_a_valid_ltm_invocation(objects):
    seen = set()
    for o, c, argv in ltm_commands(objects):
        args = build_parser(argv[0]).parse_args(argv)  # SystemExit on an unknown flag
        assert callable(args.func)
        assert "--insecure" not in argv and argv[argv.index("--certs") + 1] == "/certs"
        seen.add(argv[0])
    assert seen == {"server", "analyst", "party", "job"}


def test_every_actor_gets_one_secret_with_only_its_own_key(objects):
    secrets = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in by_kind(objects, "Secret")}
    for s in secrets.values():
        assert "ca.key" not in s["data"], "a Secret holds the CA key"
    used = {}
    for o, c, argv in ltm_commands(objects):
        pod = o["spec"]["template"]["spec"]
        actor = identity(argv)
        mount = next(m for m in c["volumeMounts"] if m["mountPath"] == "/certs")
        assert mount.get("readOnly")
        vol = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        ref = (o["metadata"]["namespace"], vol["secret"]["secretName"])
        data = secrets[ref]["data"]
        assert sorted(data) == sorted(["ca.pem", f"{actor}.pem", f"{actor}.key"]), (ref, actor, sorted(data))
        assert used.setdefault(ref, actor) == actor, f"{ref} is shared by two actors"
    assert sorted(used.values()) == sorted(ACTORS) and len(secrets) == len(ACTORS)


def test_roles_namespaces_volumes_probes_resources(objects):
    sts = by_kind(objects, "StatefulSet")
    assert sorted(o["metadata"]["namespace"] for o in sts) == ["ltm-server-0", "ltm-server-1", "ltm-server-2"]
    for o in sts:
        assert o["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    (analyst,) = by_kind(objects, "Deployment")
    claims = {v["persistentVolumeClaim"]["claimName"] for v in analyst["spec"]["template"]["spec"]["volumes"]
              if "persistentVolumeClaim" in v}
    assert claims == {"analyst-state"}
    jobs = {o["metadata"]["namespace"] for o in by_kind(objects, "Job")}
    assert jobs == {"ltm-analyst"} | {f"ltm-party-{i}" for i in range(4)}
    for o, pod in workloads(objects):
        assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"]
        for c in pod["containers"]:
            assert set(c["resources"]) == {"requests", "limits"}, o["metadata"]
            assert c["securityContext"]["readOnlyRootFilesystem"]
            if o["kind"] != "Job":  # the kubelet's gRPC probes, on the port the actor serves health alone
                health = c["args"][c["args"].index("--health-listen") + 1]
                for probe in ("readinessProbe", "livenessProbe"):
                    assert c[probe]["grpc"]["port"] == int(health.rsplit(":", 1)[1]), (o["metadata"], probe)


# ---------------------------------------------------------------------------- network policies
def _selects(selector: dict, labels: dict) -> bool:
    assert set(selector) <= {"matchLabels"}, "only matchLabels selectors are evaluated here"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


class Cluster:
    """The pods the manifests create and the NetworkPolicy verdict between two of them."""

    def __init__(self, objects):
        self.ns_labels = {o["metadata"]["name"]: o["metadata"].get("labels", {}) for o in by_kind(objects, "Namespace")}
        self.ns_labels["kube-system"] = {"kubernetes.io/metadata.name": "kube-system"}
        for name, labels in self.ns_labels.items():
            labels.setdefault("kubernetes.io/metadata.name", name)
        self.policies = by_kind(objects, "NetworkPolicy")
        self.pods = {}
        for o, _ in workloads(objects):
            labels = o["spec"]["template"]["metadata"]["labels"]
            self.pods[f'{o["metadata"]["namespace"]}/{labels["app.kubernetes.io/component"]}'] = \
                (o["metadata"]["namespace"], labels)
        self.pods["kube-system/dns"] = ("kube-system", {"k8s-app": "kube-dns"})

    def _peer(self, peer: dict, policy_ns: str, ns: str, labels: dict) -> bool:
        if "ipBlock" in peer:
            return False
        ns_ok = _selects(peer["namespaceSelector"], self.ns_labels[ns]) if "namespaceSelector" in peer \
            else ns == policy_ns
        return ns_ok and _selects(peer.get("podSelector", {}), labels)

    def _side(self, direction: str, pod: tuple, other: tuple, port: int, proto: str) -> bool:
        ns, labels = pod
        relevant = [p for p in self.policies if p["metadata"]["namespace"] == ns
                    and direction.capitalize() in p["spec"]["policyTypes"] and _selects(p["spec"]["podSelector"], labels)]
        if not relevant:
            return True
        peers_key = "from" if direction == "ingress" else "to"
        for p in relevant:
            for rule in p["spec"].get(direction, []):
                ports_ok = "ports" not in rule or any(
                    r.get("port") == port and r.get("protocol", "TCP") == proto for r in rule["ports"])
                peers_ok = peers_key not in rule or any(self._peer(x, ns, *other) for x in rule[peers_key])
                if ports_ok and peers_ok:
                    return True
        return False

    def allowed(self, src: str, dst: str, port: int, proto: str = "TCP") -> bool:
        a, b = self.pods[src], self.pods[dst]
        return self._side("egress", a, b, port, proto) and self._side("ingress", b, a, port, proto)


def test_network_policies_allow_only_what_each_role_needs(objects):
    net = Cluster(objects)
    servers = [f"ltm-server-{i}/server" for i in range(3)]
    parties = [f"ltm-party-{i}/party" for i in range(4)]
    analyst, operator = "ltm-analyst/analyst", "ltm-analyst/operator"
    needed = [(p, s, 50051) for p in parties for s in servers] + [(analyst, s, 50051) for s in servers] + \
             [(operator, analyst, 50050)] + [(x, "kube-system/dns", 53) for x in parties + [analyst, operator]]
    for src, dst, port in needed:
        assert net.allowed(src, dst, port, "UDP" if port == 53 else "TCP"), f"{src} → {dst}:{port} is blocked"
    everyone = servers + parties + [analyst, operator]
    for src in everyone:
        for dst in everyone:
            for port in (50050, 50051, 50060, 50061):
                if src != dst and (src, dst, port) not in needed:
                    assert not net.allowed(src, dst, port), f"{src} → {dst}:{port} is allowed"
    for s in servers:
        assert not net.allowed(s, "kube-system/dns", 53, "UDP"), "a server needs no egress at all"


def test_the_job_file_names_the_deployed_servers_and_parties(objects):
    """The operator submits a valid job whose servers are the deployed Services and whose parties
    are the deployed party Jobs, which join it by its id and reach the servers it names."""
    from ltm.jobfile import parse_job_file

    (job_map,) = [o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"] == "ltm-job"]
    spec = parse_job_file(job_map["data"]["job.toml"]).spec
    services = {f'{o["metadata"]["name"]}.{o["metadata"]["namespace"]}.svc.cluster.local:{o["spec"]["ports"][0]["port"]}'
                for o in by_kind(objects, "Service") if o["metadata"]["name"] == "ltm-server"}
    assert {s.endpoint for s in spec.servers} == services
    for o, c, argv in ltm_commands(objects):
        if argv[0] == "party":
            assert argv[argv.index("--job") + 1] == spec.job_id
            assert argv[argv.index("--servers") + 1].split(",") == [s.endpoint for s in spec.servers]
            assert argv[argv.index("--server-ids") + 1].split(",") == [s.server_id for s in spec.servers]
            assert argv[argv.index("--id") + 1] in {p.party_id for p in spec.parties}
        if argv[0] == "server":
            assert argv[argv.index("--id") + 1] in {s.server_id for s in spec.servers}


# ---------------------------------------------------------------------------- across clusters
def deployment_settings(root: Path) -> dict:
    """The spec of overlays/cross-cluster/deployment/deployment.yaml: the one place of shared settings."""
    text = (root / "overlays/cross-cluster/deployment/deployment.yaml").read_text()
    (doc,) = [d for d in yaml.safe_load_all(text) if d]
    assert doc["metadata"]["annotations"]["config.kubernetes.io/local-config"] == "true"
    return doc["spec"]


def check_cross_cluster(pieces: dict[str, list[dict]], d: dict) -> None:
    """Every cross-cluster piece uses the settings ``d`` where they belong, and no label selector
    stands where only addresses mean something."""
    from ltm.jobfile import parse_job_file

    endpoints = [s["endpoint"] for s in d["servers"]]
    for piece, objs in pieces.items():
        policies = {p["metadata"]["name"]: p["spec"] for p in by_kind(objs, "NetworkPolicy")}
        if piece.startswith("server-"):
            (svc,) = [s for s in by_kind(objs, "Service") if s["metadata"]["name"] == "ltm-server"]
            assert svc["spec"]["type"] == d["serverService"]["type"]
            assert svc["spec"]["externalTrafficPolicy"] == d["serverService"]["externalTrafficPolicy"]
            (rule,) = policies["server-ingress"]["ingress"]
            assert rule["from"] == d["serverClients"] and rule["ports"] == [{"protocol": "TCP", "port": 50051}]
            assert "egress" not in policies["server-ingress"]
        elif piece.startswith("party-"):
            (actor,) = [c for c in by_kind(objs, "ConfigMap") if c["metadata"]["name"] == "ltm-actor"]
            assert actor["data"]["job"] == d["job"] and actor["data"]["servers"].split(",") == endpoints
            assert actor["data"]["id"] == piece
            assert policies["party-egress"]["egress"][0]["to"] == d["serverPeers"]
            for o, c, argv in ltm_commands(objs):
                assert argv[argv.index("--job") + 1] == d["job"]
                assert argv[argv.index("--servers") + 1].split(",") == endpoints
        else:
            (job_map,) = [o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"] == "ltm-job"]
            spec = parse_job_file(job_map["data"]["job.toml"]).spec
            assert spec.job_id == d["job"] and [s.endpoint for s in spec.servers] == endpoints
            assert [s.server_id for s in spec.servers] == ["server-0", "server-1", "server-2"]
            assert policies["analyst"]["egress"][0]["to"] == d["serverPeers"]
        for name, p in policies.items():  # namespace labels of another cluster select nothing
            for rule in p.get("ingress", []) + p.get("egress", []):
                for peer in rule.get("from", []) + rule.get("to", []):
                    ns_sel = peer.get("namespaceSelector", {}).get("matchLabels", {})
                    assert "ltm/role" not in ns_sel, (piece, name, peer)


def test_the_cross_cluster_pieces_use_the_shared_settings(rendered):
    check_cross_cluster({p: rendered[f"cross-cluster/{p}"] for p in PIECES}, deployment_settings(K8S))


def test_the_shared_settings_are_in_one_place(tree, tmp_path):
    """Change deployment.yaml alone: every piece follows, and none of the old values is left anywhere."""
    root = tmp_path / "k8s"
    shutil.copytree(tree, root)
    path = root / "overlays/cross-cluster/deployment/deployment.yaml"
    old = deployment_settings(root)
    text = path.read_text()
    new_values = {old["job"]: "grid-load-2027-01",
                  **{s["endpoint"]: f"ltm-{i}.other.test:443" for i, s in enumerate(old["servers"])},
                  **{p["ipBlock"]["cidr"]: f"10.9.{i}.0/24"
                     for i, p in enumerate(old["serverPeers"] + old["serverClients"])},
                  "type: LoadBalancer": "type: NodePort"}
    for a, b in new_values.items():
        assert text.count(a) == 1, a
        text = text.replace(a, b)
    path.write_text(text)
    new = deployment_settings(root)
    assert new != old and new["job"] == "grid-load-2027-01"
    pieces = {p: render.render(root / "overlays/cross-cluster" / p) for p in PIECES}
    check_cross_cluster(pieces, new)
    dumped = yaml.safe_dump_all([o for objs in pieces.values() for o in objs])
    for a in new_values:
        if not a.startswith("type:"):
            assert a not in dumped, f"{a} is still in a rendered piece: it is set in a second place"


# ---------------------------------------------------------------------------- the image
def kustomizations() -> dict[str, dict]:
    return {str(p.parent.relative_to(K8S)): yaml.safe_load(p.read_text()) for p in K8S.rglob("kustomization.yaml")}


def image_ref(rule: dict) -> str:
    return rule["newName"] + (f'@{rule["digest"]}' if "digest" in rule else f':{rule["newTag"]}')


def test_each_overlay_sets_the_image_in_one_place(rendered):
    setters = {d: k["images"] for d, k in kustomizations().items() if "images" in k}
    assert sorted(setters) == ["overlays/cross-cluster/image", "overlays/local"]
    assert all(len(rules) == 1 and rules[0]["name"] == "ltm" for rules in setters.values())
    for f in list((K8S / "base").rglob("*.yaml")) + list((K8S / "components").rglob("*.yaml")):
        for o in yaml.safe_load_all(f.read_text()):
            for pod in render._pod_specs(o or {"kind": ""}):
                assert {c["image"] for c in pod.get("initContainers", []) + pod["containers"]} == {"ltm"}, f
    for overlay, objects in rendered.items():
        want = image_ref(setters["overlays/local" if overlay == "local" else "overlays/cross-cluster/image"][0])
        images = {c["image"] for o in objects for pod in render._pod_specs(o)
                  for c in pod.get("initContainers", []) + pod["containers"]}
        assert images == {want}, overlay
    for piece in PIECES:  # every piece takes the one image component
        assert "../image" in kustomizations()[f"overlays/cross-cluster/{piece}"]["components"]


def test_the_readme_builds_tags_and_pushes_the_images_the_overlays_run():
    text = (ROOT / "deploy" / "README.md").read_text()
    section = text[text.index("### The image\n"):text.index("### One cluster\n")]
    lines = [shlex.split(line, comments=True) for line in section.splitlines() if line.startswith("docker ")]
    (build,) = [a for a in lines if a[1] == "build"]
    (tag,) = [a for a in lines if a[1] == "tag"]
    (push,) = [a for a in lines if a[1] == "push"]
    k = kustomizations()
    local = image_ref(k["overlays/local"]["images"][0])
    registry = image_ref(k["overlays/cross-cluster/image"]["images"][0])
    assert build[build.index("-t") + 1] == local and build[build.index("-f") + 1] == "deploy/Dockerfile"
    assert (ROOT / build[build.index("-f") + 1]).is_file()
    assert tag[2:] == [local, registry] and push[2:] == [registry]


# ---------------------------------------------------------------------------- the renderer's limits
@pytest.mark.parametrize("replacement, message", [
    ({"source": {"kind": "ConfigMap", "name": "ltm-actor", "fieldPath": "data.nothing"},
      "targets": [{"select": {"kind": "Service", "name": "ltm-server"}, "fieldPaths": ["spec.type"]}]}, "no field"),
    ({"source": {"kind": "ConfigMap", "name": "ltm-actor", "fieldPath": "data.id"},
      "targets": [{"select": {"kind": "Service", "name": "ltm-server"}, "fieldPaths": ["spec.type"]}]}, "no create"),
    ({"source": {"kind": "ConfigMap", "name": "ltm-actor", "fieldPath": "data.id"},
      "targets": [{"select": {"kind": "Service", "name": "nothing"}, "fieldPaths": ["spec.type"]}]}, "matches nothing"),
    ({"source": {"kind": "ConfigMap", "name": "ltm-actor", "fieldPath": "data.id"},
      "targets": [{"select": {"kind": "StatefulSet", "name": "ltm-server"},
                   "fieldPaths": ["spec.template.spec.containers.[name=server].image"]}]}, "only [key] brackets"),
    ({"source": {"kind": "ConfigMap", "name": "ltm-actor", "fieldPath": "data.id"},
      "targets": [{"select": {"kind": "Service", "name": "ltm-server"},
                   "fieldPaths": ["spec.selector.[app.kubernetes.io/name]"],
                   "options": {"delimiter": ",", "index": 3}}]}, "has no part 3"),
])
def test_the_renderer_refuses_what_it_does_not_support_or_cannot_find(tmp_path, replacement, message):
    d = tmp_path / "o"
    d.mkdir()
    (d / "kustomization.yaml").write_text(yaml.safe_dump({"resources": [str(K8S / "base" / "server-0")],
                                                         "replacements": [replacement]}))
    with pytest.raises(render.RenderError, match=re.escape(message)):
        render.render(d)

"""deploy/k8s pods: every namespace enforces the "restricted" Pod Security profile and every pod spec
meets it; a party's data gets in exactly as deploy/README.md ("Loading a party's data") says.

The data-loading commands are parsed out of the README and checked against the rendered objects
(namespace, pod, container, volume, mount paths, the party's --data), then replayed on a directory
standing in for the volume, with the party Job's own `wait-for-data` script run by `sh`.
"""
from __future__ import annotations

import copy
import os
import posixpath
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.optional import require

yaml = require("yaml")

from tests.helpers.k8s import ROOT, by_kind, env_of, expand, render  # noqa: E402

README = ROOT / "deploy" / "README.md"
PSS = ("enforce", "audit", "warn")
# The volume types the restricted profile allows (Kubernetes Pod Security Standards).
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


# ---------------------------------------------------------------------------- Pod Security
def pod_specs(objects: list[dict]):
    """(object, pod spec) for every object that makes pods."""
    for o in objects:
        for pod in render._pod_specs(o):
            yield o, pod


def restricted_violations(pod: dict) -> list[str]:
    """What in ``pod`` the Pod Security Standards' "restricted" profile refuses (empty: none)."""
    bad = [f for f in ("hostNetwork", "hostPID", "hostIPC") if pod.get(f)]
    psc = pod.get("securityContext", {})
    if psc.get("sysctls"):
        bad.append("sysctls")
    for v in pod.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            bad.append(f"volume {v['name']}: {sorted(kinds)}")
    for c in pod.get("initContainers", []) + pod["containers"] + pod.get("ephemeralContainers", []):
        sc, name = c.get("securityContext", {}), c["name"]
        if sc.get("privileged"):
            bad.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append(f"{name}: allowPrivilegeEscalation is not false")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            bad.append(f"{name}: capabilities do not drop ALL")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            bad.append(f"{name}: capabilities added {caps['add']}")
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            bad.append(f"{name}: runAsNonRoot is not true")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            bad.append(f"{name}: runAsUser 0")
        if sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type") not in ("RuntimeDefault", "Localhost"):
            bad.append(f"{name}: seccompProfile is not RuntimeDefault or Localhost")
        if sc.get("procMount", "Default") != "Default":
            bad.append(f"{name}: procMount")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            bad.append(f"{name}: hostPort")
    return bad


def test_every_namespace_enforces_the_restricted_profile(rendered):
    seen = set()
    for overlay, objects in rendered.items():
        for ns in by_kind(objects, "Namespace"):
            labels = ns["metadata"].get("labels", {})
            for mode in PSS:
                assert labels.get(f"pod-security.kubernetes.io/{mode}") == "restricted", \
                    (overlay, ns["metadata"]["name"], mode)
            seen.add(ns["metadata"]["name"])
    assert len(seen) == 8


def test_every_pod_meets_the_restricted_profile(rendered):
    kinds = set()
    for overlay, objects in rendered.items():
        for o, pod in pod_specs(objects):
            assert restricted_violations(pod) == [], (overlay, o["kind"], o["metadata"]["name"])
            assert pod["automountServiceAccountToken"] is False
            for c in pod.get("initContainers", []) + pod["containers"]:
                assert c["securityContext"]["readOnlyRootFilesystem"], (o["metadata"]["name"], c["name"])
                assert set(c["resources"]) == {"requests", "limits"}, (o["metadata"]["name"], c["name"])
            kinds.add(o["kind"])
    assert kinds == {"StatefulSet", "Deployment", "Job", "Pod"}


@pytest.mark.parametrize("breach", [
    lambda p: p["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
    lambda p: p["initContainers"][0]["securityContext"].update(capabilities={"drop": []}),
    lambda p: p["containers"][0]["securityContext"].update(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}),
    lambda p: p["securityContext"].pop("runAsNonRoot"),
    lambda p: p["containers"][0]["securityContext"].update(runAsUser=0),
    lambda p: p["securityContext"].update(seccompProfile={"type": "Unconfined"}),
    lambda p: p["containers"][0]["securityContext"].update(privileged=True),
    lambda p: p["volumes"].append({"name": "host", "hostPath": {"path": "/"}}),
    lambda p: p.update(hostNetwork=True),
])
def test_the_restricted_check_finds_each_breach(rendered, breach):
    """The check above is not vacuous: each breach of the profile, made in the party's pod, is found."""
    (job,) = [o for o in by_kind(rendered["local"], "Job") if o["metadata"]["namespace"] == "ltm-party-0"]
    pod = copy.deepcopy(job["spec"]["template"]["spec"])
    assert restricted_violations(pod) == []
    breach(pod)
    assert restricted_violations(pod)


# ---------------------------------------------------------------------------- loading a party's data
def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"### {title}\n")
    end = text.find("\n#", start + 1)
    return text[start:end if end > 0 else None]


def kubectl_lines(text: str) -> list[list[str]]:
    """Every `kubectl …` line of the text's sh blocks, split as sh would."""
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```sh"
            continue
        if inside and line.startswith("kubectl "):
            out.append(shlex.split(line, comments=True))
    return out


def parse_kubectl(argv: list[str]) -> dict:
    """``kubectl -n NS verb ARGS… [-c C] [--flag=v…] [-- CMD…]`` → its parts."""
    assert argv[0] == "kubectl"
    out: dict = {"positional": [], "exec": []}
    words = argv[1:]
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--":
            out["exec"] = words[i + 1:]
            break
        if w in ("-n", "-c"):
            out[w] = words[i + 1]
            i += 2
            continue
        if w.startswith("--"):
            name, _, value = w[2:].partition("=")
            out[name] = value
        else:
            out["positional"].append(w)
        i += 1
    out["verb"], out["args"] = out["positional"][0], out["positional"][1:]
    return out


def volume_mount(pod: dict, container: dict, claim: str) -> dict:
    """``container``'s mount of the volume of ``pod`` that is PersistentVolumeClaim ``claim``."""
    (vol,) = [v for v in pod["volumes"] if v.get("persistentVolumeClaim", {}).get("claimName") == claim]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == vol["name"]]
    return mount


@pytest.fixture(scope="module")
def loading(rendered) -> dict:
    """The README's data-loading commands and the rendered objects they name, checked to agree."""
    cmds = [parse_kubectl(a) for a in kubectl_lines(section("Loading a party's data"))]
    verbs = [c["verb"] for c in cmds]
    assert verbs == ["wait", "cp", "exec", "exec", "wait", "delete"], verbs
    (ns,) = {c["-n"] for c in cmds}
    objects = [o for o in rendered["local"] if o["metadata"].get("namespace") == ns]
    assert objects, f"the README loads data into namespace {ns}, which the manifests do not make"
    cp = cmds[1]
    src, dst = cp["args"]
    pod_name, _, dst_path = dst.partition(":")
    (loader,) = [o for o in by_kind(objects, "Pod") if o["metadata"]["name"] == pod_name]
    (container,) = [c for c in loader["spec"]["containers"] if c["name"] == cp["-c"]]
    (job,) = by_kind(objects, "Job")
    party_pod = job["spec"]["template"]["spec"]
    (party,) = party_pod["containers"]
    (wait,) = party_pod["initContainers"]
    (data_vol,) = [v for v in party_pod["volumes"] if v["name"] == next(
        m["name"] for m in party["volumeMounts"] if m["mountPath"] == "/var/lib/ltm/input")]
    claim = data_vol["persistentVolumeClaim"]["claimName"]
    assert claim in {p["metadata"]["name"] for p in by_kind(objects, "PersistentVolumeClaim")}
    return {"cmds": cmds, "ns": ns, "objects": objects, "src": src, "dst_path": dst_path, "loader": loader,
            "container": container, "job": job, "party_pod": party_pod, "party": party, "wait": wait,
            "claim": claim}


def test_the_documented_commands_name_the_rendered_pod_container_and_paths(loading):
    cmds, loader, container, claim = loading["cmds"], loading["loader"], loading["container"], loading["claim"]
    name = loader["metadata"]["name"]
    assert name == "data-loader" and container["name"] == "loader"
    # every command names the same pod / Job the manifests make
    assert cmds[0]["args"] == [f"pod/{name}"] and cmds[0]["for"] == "condition=Ready"
    assert all(c["args"] == [name] and c["-c"] == container["name"] for c in cmds[2:4])
    assert cmds[4]["args"] == [f'job/{loading["job"]["metadata"]["name"]}'] and cmds[4]["for"] == "condition=Complete"
    assert cmds[5]["args"] == ["pod", name]
    # the loader writes the volume the party Job reads, at the path the party reads it from
    lmount = volume_mount(loader["spec"], container, claim)
    assert not lmount.get("readOnly") and not loader["spec"]["volumes"][0]["persistentVolumeClaim"].get("readOnly")
    pmount = volume_mount(loading["party_pod"], loading["party"], claim)
    wmount = volume_mount(loading["party_pod"], loading["wait"], claim)
    assert pmount.get("readOnly") and wmount.get("readOnly"), "the party's data volume must be mounted read-only"
    mv = cmds[2]["exec"]
    assert mv[0] == "mv" and mv[1] == loading["dst_path"]
    assert posixpath.dirname(loading["dst_path"]) == lmount["mountPath"]
    final = posixpath.relpath(mv[2], lmount["mountPath"])
    env = env_of(loading["objects"], loading["ns"], loading["party"])
    data = expand(loading["party"]["args"], env)
    assert data[data.index("--data") + 1] == posixpath.join(pmount["mountPath"], final)
    assert final == f'{env["LTM_ID"]}.csv' and loading["src"] == final  # the file the party holds locally
    assert cmds[3]["exec"] == ["sha256sum", mv[2]]
    # ReadWriteOnce: the party's pod is scheduled onto the loader's node
    (term,) = loading["party_pod"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= loader["metadata"]["labels"].items()
    party_labels = loading["job"]["spec"]["template"]["metadata"]["labels"]
    assert not term["labelSelector"]["matchLabels"].items() <= party_labels.items()


def test_every_kubectl_command_in_the_readme_names_an_object_that_exists(rendered):
    """No placeholder pods: a namespaced command's pod or Job is one the local overlay makes."""
    made = {(o["metadata"].get("namespace"), o["kind"].lower(), o["metadata"]["name"]) for o in rendered["local"]}
    checked = 0
    for argv in kubectl_lines(README.read_text()):
        c = parse_kubectl(argv)
        if "-n" not in c:
            continue
        refs = [a.partition(":")[0] for a in c["args"] if ":" in a] if c["verb"] == "cp" else c["args"]
        if c["verb"] == "delete":
            refs = ["/".join(c["args"])]
        for ref in refs:
            kind, _, name = ref.rpartition("/")
            assert (c["-n"], kind or "pod", name) in made, f"{' '.join(argv)}: no {ref} in {c['-n']}"
            checked += 1
    assert checked >= 6


def run_wait(loading, volume: Path, wait_s: int, timeout: float = 30) -> subprocess.CompletedProcess:
    """The party Job's wait-for-data script, run by sh with its rendered environment, ``volume``
    standing for the party-data volume and ``wait_s`` for data_wait_s."""
    c = loading["wait"]
    assert c["command"][:2] == ["sh", "-c"]
    env = env_of(loading["objects"], loading["ns"], c)
    assert env["LTM_INPUT"] == volume_mount(loading["party_pod"], c, loading["claim"])["mountPath"]
    assert int(env["LTM_DATA_WAIT_S"]) >= 3600, "data_wait_s: a party needs time to load its data"
    env.update(LTM_INPUT=str(volume), LTM_DATA_WAIT_S=str(wait_s))
    return subprocess.run(["sh", "-c", c["command"][2]], env={"PATH": os.environ["PATH"], **env},
                          capture_output=True, text=True, timeout=timeout)


def on_volume(volume: Path, mount: str, path: str) -> Path:
    return volume / posixpath.relpath(path, mount)


def fail_job_codes(job: dict) -> set[int]:
    return {code for r in job["spec"]["podFailurePolicy"]["rules"] if r["action"] == "FailJob"
            for code in r["onExitCodes"]["values"]}


@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh")
def test_wait_for_data_gives_up_after_data_wait_s_and_fails_the_job(loading, tmp_path):
    """No data (or only the half-copied .part file): the wait ends after data_wait_s with a message
    naming the file and the setting, and an exit status the Job's podFailurePolicy fails on."""
    lmount = volume_mount(loading["loader"]["spec"], loading["container"], loading["claim"])["mountPath"]
    on_volume(tmp_path, lmount, loading["dst_path"]).write_text("x,y\n1,2\n")  # kubectl cp done, not renamed
    t0 = time.monotonic()
    out = run_wait(loading, tmp_path, wait_s=1)
    assert out.returncode != 0 and out.returncode in fail_job_codes(loading["job"]), out
    assert "did not appear within 1s" in out.stderr and "data_wait_s" in out.stderr and ".csv" in out.stderr
    assert time.monotonic() - t0 < 15
    assert loading["job"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"  # podFailurePolicy needs it


@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh")
def test_the_documented_commands_load_the_file_the_party_reads(loading, tmp_path):
    """Replayed on a directory: wait-for-data, already waiting, sees the file once the README's cp and
    mv are done, and it is the party's --data, byte for byte what the party holds."""
    cmds = loading["cmds"]
    lmount = volume_mount(loading["loader"]["spec"], loading["container"], loading["claim"])["mountPath"]
    csv = b"Global_active_power,Voltage\n1.5,231.0\n0.25,229.5\n"
    c = loading["wait"]
    env = env_of(loading["objects"], loading["ns"], c)
    env.update(LTM_INPUT=str(tmp_path), LTM_DATA_WAIT_S="30")
    waiter = subprocess.Popen(["sh", "-c", c["command"][2]], env={"PATH": os.environ["PATH"], **env},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        assert waiter.poll() is None, "wait-for-data ended before any data was there"
        on_volume(tmp_path, lmount, loading["dst_path"]).write_bytes(csv)  # kubectl cp
        mv = cmds[2]["exec"]
        subprocess.run([mv[0], *(str(on_volume(tmp_path, lmount, p)) for p in mv[1:])], check=True)  # kubectl exec mv
        out, err = waiter.communicate(timeout=20)
    finally:
        waiter.kill()
    assert waiter.returncode == 0, err
    assert f"{len(csv)} bytes" in out
    pmount = volume_mount(loading["party_pod"], loading["party"], loading["claim"])["mountPath"]
    args = expand(loading["party"]["args"], env_of(loading["objects"], loading["ns"], loading["party"]))
    assert on_volume(tmp_path, pmount, args[args.index("--data") + 1]).read_bytes() == csv
    assert sorted(p.name for p in tmp_path.iterdir()) == [loading["src"]]

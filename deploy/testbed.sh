#!/usr/bin/env bash
# The compose testbed, run for real: build the image, bring docker-compose.yml up, check the release
# against `ltm demo --seed N` with the same parameters, check who holds which key, check who reaches
# whom (a party only the servers, the operator only the analyst, no server another), tear it all down.
#
#   deploy/testbed.sh [--seed N] [--columns] [--keep] [--build-only]
#
# Needs a Docker engine.  Run as root on a Debian machine without one, it installs Debian's
# docker.io and starts dockerd in the background (log in $LTM_TESTBED_DIR/dockerd.log), and stops
# that dockerd again at the end; engine or not, it installs docker-compose and (with no registry)
# mmdebstrap when they are missing (not root: one line naming them, exit 3).
# Base image: the digest-pinned one in deploy/Dockerfile when an image registry answers; otherwise a
# Debian bookworm base built from Debian packages (mmdebstrap | docker import → ltm-base:bookworm-local).
# The project's wheels come from a local wheelhouse (deploy/wheelhouse, git- and docker-ignored
# except for the wheels themselves), built here with pip at the versions this Python has installed.
#
# The testbed job runs in SEEDED MODE (deploy/compose.seeded.yml): reproducible and NOT private,
# which is what makes the comparison with `ltm demo --seed N` possible.
#   --columns     the columns partition's replicated release (deploy/compose.columns.yml over the
#                 seeded overlay; honest-majority trust: at most 1 of 3 servers corrupt), checked
#                 against `ltm demo --partition columns --colluding-servers 1`
#   --keep        leave the containers and volumes up (tear down later with the command printed)
#   --build-only  build the image and stop
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
SEED=7
KEEP=0
COLUMNS=0
BUILD_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) SEED="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --columns) COLUMNS=1; shift ;;
    --build-only) BUILD_ONLY=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "testbed.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
PROJECT="${LTM_TESTBED_PROJECT:-ltm-testbed}"
# the parameters demo-data's `ltm operate --write-job` gets in docker-compose.yml (defaults otherwise)
DEMO_PARAMS=""
OVERLAYS="-f deploy/compose.seeded.yml"
if [ "$COLUMNS" = 1 ]; then
  DEMO_PARAMS="--partition columns --colluding-servers 1"
  OVERLAYS="$OVERLAYS -f deploy/compose.columns.yml"
fi
WORK="${LTM_TESTBED_DIR:-/var/tmp/ltm-testbed}"
mkdir -p "$WORK"
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
T0=$(date +%s.%N)
declare -A PHASE
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "testbed: $*"; }

# ------------------------------------------------------------------ a Docker engine
STARTED_DOCKERD=""
DOCKERD_PID=""
cleanup() {
  local rc=$?
  if [ "$KEEP" = 0 ] && [ -n "${COMPOSE:-}" ]; then
    $COMPOSE down -v --remove-orphans >/dev/null 2>&1 || true
  fi
  if [ -n "$STARTED_DOCKERD" ] && [ -n "$DOCKERD_PID" ]; then
    say "stopping the dockerd this script started (pid $DOCKERD_PID)"
    kill "$DOCKERD_PID" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 1; done
  fi
  exit $rc
}
trap cleanup EXIT

# install_missing WHY PKG…: install the Debian packages named (root), or stop with one line saying
# which to install; whether an engine already answers or not (a running engine may lack compose).
install_missing() {
  local why="$1"; shift
  [ $# = 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "testbed.sh: $why: install $* (Debian: apt-get install $*), or run as root on Debian" >&2; exit 3
  fi
  say "installing Debian's $* ($why)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
has_compose() { docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null; }

t=$(date +%s.%N)
if ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "testbed.sh: no Docker engine answers and not root: start one (or run as root on Debian)" >&2; exit 3
  fi
  if ! command -v dockerd >/dev/null; then install_missing "no Docker engine" docker.io iptables; fi
  say "starting dockerd (log $WORK/dockerd.log)"
  dockerd >"$WORK/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  STARTED_DOCKERD=1
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "testbed.sh: dockerd did not start; see $WORK/dockerd.log" >&2; exit 3; }
fi
if ! has_compose; then install_missing "the engine has no compose" docker-compose; fi
if docker compose version >/dev/null 2>&1; then
  COMPOSE_BIN=(docker compose)
else
  COMPOSE_BIN=(docker-compose)
fi
COMPOSE="${COMPOSE_BIN[*]} -p $PROJECT -f docker-compose.yml $OVERLAYS"
say "engine $(docker version --format '{{.Server.Version}}'), storage $(docker info --format '{{.Driver}}'), compose: $(${COMPOSE_BIN[*]} version --short 2>/dev/null || true)"
PHASE[engine]=$(since "$t")

# ------------------------------------------------------------------ the base image
t=$(date +%s.%N)
PINNED="$(sed -n 's/^ARG BASE=//p' deploy/Dockerfile)"
if timeout 60 docker pull -q "$PINNED" >/dev/null 2>&1; then
  say "registry reachable: base $PINNED"
  unset LTM_BASE_IMAGE
else
  export LTM_BASE_IMAGE=ltm-base:bookworm-local
  if docker image inspect "$LTM_BASE_IMAGE" >/dev/null 2>&1; then
    say "no registry: reusing $LTM_BASE_IMAGE (built from Debian packages earlier; docker rmi it to rebuild)"
  else
    say "no registry: building $LTM_BASE_IMAGE from Debian bookworm packages with mmdebstrap"
    if ! command -v mmdebstrap >/dev/null; then install_missing "no registry to pull the base image" mmdebstrap; fi
    mmdebstrap --quiet --variant=essential --include=python3,python3-venv,libstdc++6 \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' bookworm "$WORK/base.tar" "${LTM_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
    docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      "$WORK/base.tar" "$LTM_BASE_IMAGE" >/dev/null
    rm -f "$WORK/base.tar"
  fi
fi
PHASE[base_image]=$(since "$t")

# ------------------------------------------------------------------ wheels, then the image
t=$(date +%s.%N)
mkdir -p deploy/wheelhouse
rm -f deploy/wheelhouse/ltm-*.whl
# the image gets the dependency versions this Python runs, so both sides compute the same bytes
"$PYTHON" -m pip freeze --exclude-editable 2>/dev/null | grep -v '^ltm[= @]' >"$WORK/constraints.txt" || true
"$PYTHON" -m pip wheel --quiet --wheel-dir deploy/wheelhouse -c "$WORK/constraints.txt" ".[deploy]" 2>&1 \
  | grep -v '^WARNING: Location' || true
ls deploy/wheelhouse/ltm-*.whl >/dev/null
$COMPOSE build --quiet certs-init >/dev/null 2>"$WORK/build.log" || { cat "$WORK/build.log" >&2; exit 4; }
say "image ltm:local $(docker image inspect ltm:local --format '{{.Id}} {{.Size}}') bytes"
PHASE[wheels_and_image]=$(since "$t")
if [ "$BUILD_ONLY" = 1 ]; then exit 0; fi

# ------------------------------------------------------------------ the job in compose
t=$(date +%s.%N)
$COMPOSE down -v --remove-orphans >/dev/null 2>&1 || true   # a clean slate: the job id runs once
export LTM_SEED="$SEED"
set +e
$COMPOSE up --no-build --exit-code-from operator operator >"$WORK/up.log" 2>&1
OP_RC=$?
set -e
PHASE[compose_up_job]=$(since "$t")
grep -E '^[^|]*operator[^|]*\|' "$WORK/up.log" | sed 's/^[^|]*| //' | tail -5 || true
if [ "$OP_RC" != 0 ]; then
  echo "testbed.sh: the operator exited $OP_RC; logs:" >&2
  $COMPOSE logs --no-color 2>&1 | tail -80 >&2
  exit 5
fi
COMPOSE_SHA=$(grep -oE 'release sha256 [0-9a-f]{64}' "$WORK/up.log" | tail -1 | cut -d' ' -f3)

# every party ran to completion
FAIL=0
while read -r svc rc; do
  case "$svc" in party-*) [ "$rc" = 0 ] || { echo "testbed.sh: $svc exited $rc" >&2; FAIL=1; } ;; esac
done < <(docker inspect --format '{{index .Config.Labels "com.docker.compose.service"}} {{.State.ExitCode}}' \
           $(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT"))

# who holds what: each actor's container sees exactly its own bundle at /certs, and no container
# (certs-init aside, whose CA lived in its own /tmp) has a volume or image path holding ca.key
t=$(date +%s.%N)
VOLS=$(docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT")
docker run --rm --network none --entrypoint sh $(for v in $VOLS; do printf -- '-v %s:/vol/%s:ro ' "$v" "$v"; done) \
  ltm:local -c 'cd /vol && find . -type f | sort; find / \( -path /proc -o -path /sys -o -path /vol \) -prune -o -name ca.key -print 2>/dev/null; true' \
  >"$WORK/volumes.txt"
docker inspect --format '{{index .Config.Labels "com.docker.compose.service"}} {{range .Mounts}}{{.Name}}={{.Destination}} {{end}}' \
  $(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT") >"$WORK/mounts.txt"
"$PYTHON" - "$WORK/volumes.txt" "$WORK/mounts.txt" <<'PY' || FAIL=1
import sys
files = [l.strip() for l in open(sys.argv[1]) if l.strip()]
in_image = [f for f in files if not f.startswith("./")]
volume_files = {}
for f in files:
    if f.startswith("./"):
        vol, _, rel = f[2:].partition("/")
        volume_files.setdefault(vol, []).append(rel)
bad = [f"the image holds {f}" for f in in_image]
for line in filter(str.strip, open(sys.argv[2])):
    svc, *mounts = line.split()
    seen = {dest: sorted(volume_files.get(name, [])) for name, _, dest in (m.partition("=") for m in mounts)}
    if svc in ("certs-init", "demo-data"):  # the issuer, and the data owners' stand-in (no key)
        continue
    if seen.get("/certs") != sorted(["ca.pem", f"{svc}.pem", f"{svc}.key"]):
        bad.append(f"{svc} sees {seen.get('/certs')} at /certs, not exactly its own bundle")
    for dest, names in seen.items():
        if any(n.rsplit("/", 1)[-1] == "ca.key" for n in names):
            bad.append(f"{svc} can read a ca.key under {dest}")
for b in bad:
    print("testbed.sh:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
PHASE[key_check]=$(since "$t")
[ "$FAIL" = 0 ] || exit 6
say "certificates: every actor holds only ca.pem and its own key pair; no container can read ca.key"

# ------------------------------------------------------------------ who reaches whom
# With the servers and the analyst still up: probe TCP connections from inside the actors' own
# containers (the service's networks and hardening; `run` starts a one-off container of a service
# that has exited).  A listener runs in a container of party-1 so that "party → party" has
# something to reach.  Names and every address of each target are tried (3 s each, in parallel).
t=$(date +%s.%N)
PROBE='import concurrent.futures, json, socket, sys
def probe(target):
    host, port = target.rsplit(":", 1)
    try:
        addr = socket.getaddrinfo(host, int(port), socket.AF_INET, socket.SOCK_STREAM)[0][4]
    except OSError:
        return "unresolvable"
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(addr)
        return "open"
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return f"unreachable ({exc.strerror})"
    finally:
        s.close()
with concurrent.futures.ThreadPoolExecutor(32) as pool:
    print(json.dumps(dict(zip(sys.argv[1:], pool.map(probe, sys.argv[1:])))))'
LISTEN='import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 50070))
s.listen(16)
while True:
    s.accept()[0].close()'
LISTENER="${PROJECT}_probe-party-1"
docker rm -f "$LISTENER" >/dev/null 2>&1 || true
$COMPOSE run -d --no-deps --name "$LISTENER" --entrypoint python party-1 -c "$LISTEN" >/dev/null 2>"$WORK/probe.log"
ips() { docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}' "$1"; }
ctr() { $COMPOSE ps -q "$1"; }
on() { local port=$1; shift; for ip in "$@"; do printf '%s:%s ' "$ip" "$port"; done; }
PARTY1=$(on 50070 $(ips "$LISTENER"))
ANALYST=$(on 50050 $(ips "$(ctr analyst)"))
SRV1=$(on 50051 $(ips "$(ctr server-1)"))
SRV2=$(on 50051 $(ips "$(ctr server-2)"))
SRV0=$(on 50051 $(ips "$(ctr server-0)"))
sleep 1  # the listener is listening
{
  echo "party-0 $($COMPOSE run --rm -T --no-deps --entrypoint python party-0 -c "$PROBE" \
      server-0:50051 server-1:50051 server-2:50051 analyst:50050 party-1:50070 $PARTY1 $ANALYST 2>>"$WORK/probe.log")"
  echo "server-0 $(docker exec "$(ctr server-0)" python -c "$PROBE" server-1:50051 server-2:50051 $SRV1 $SRV2 $PARTY1)"
  echo "server-1 $(docker exec "$(ctr server-1)" python -c "$PROBE" server-0:50051 server-2:50051 $SRV0 $SRV2)"
  echo "analyst $(docker exec "$(ctr analyst)" python -c "$PROBE" server-0:50051 server-1:50051 server-2:50051)"
  echo "operator $($COMPOSE run --rm -T --no-deps --entrypoint python operator -c "$PROBE" \
      analyst:50050 server-0:50051 $SRV0 2>>"$WORK/probe.log")"
} >"$WORK/probes.txt"
docker rm -f "$LISTENER" >/dev/null 2>&1 || true
"$PYTHON" - "$WORK/probes.txt" "$PARTY1" "$ANALYST" "$SRV0 $SRV1 $SRV2" <<'PY' || FAIL=1
import json, sys
seen = {}
for line in filter(str.strip, open(sys.argv[1])):
    actor, _, js = line.partition(" ")
    seen[actor] = json.loads(js)
party1, analyst, servers = (set(a.split()) for a in sys.argv[2:5])
bad, states = [], {}
def expect(actor, targets, reachable, what):
    for target in targets:
        state = seen.get(actor, {}).get(target, "not probed")
        if (state == "open") != reachable:
            bad.append(f"{actor} → {target} ({what}): {state}, expected {'open' if reachable else 'no connection'}")
        states.setdefault(what, []).append(state.split(" ")[0])
expect("party-0", ["server-0:50051", "server-1:50051", "server-2:50051"], True, "party → servers")
expect("party-0", ["party-1:50070", *party1], False, "party → party")
expect("party-0", ["analyst:50050", *analyst], False, "party → analyst")
expect("server-0", [t for t in seen.get("server-0", {}) if t.endswith(":50051")], False, "server → server")
expect("server-1", list(seen.get("server-1", {})), False, "server → server")
expect("analyst", ["server-0:50051", "server-1:50051", "server-2:50051"], True, "analyst → servers")
expect("operator", ["analyst:50050"], True, "operator → analyst")
expect("operator", [t for t in seen.get("operator", {}) if t != "analyst:50050"], False, "operator → servers")
# the listener answers where a network is shared: server-0 and party-1 share p1-s0
if not any(seen.get("server-0", {}).get(t) == "open" for t in party1):
    bad.append("server-0 cannot reach the party-1 listener either: the probe proves nothing")
for b in bad:
    print("testbed.sh: network:", b, file=sys.stderr)
summary = "; ".join(f"{w}: " + ", ".join(f"{s.count(k)} {k}" for k in sorted(set(s))) for w, s in states.items())
print(f"testbed: networks ({'FAILED' if bad else 'as designed'}): {summary}")
sys.exit(1 if bad else 0)
PY
PHASE[networks]=$(since "$t")
[ "$FAIL" = 0 ] || { cat "$WORK/probes.txt" >&2; exit 9; }

# ------------------------------------------------------------------ the same job with `ltm demo`
t=$(date +%s.%N)
"$PYTHON" -m ltm.cli demo --seed "$SEED" $DEMO_PARAMS --json >"$WORK/demo.json"
DEMO_SHA=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["release_sha256"])' "$WORK/demo.json")
PHASE[ltm_demo]=$(since "$t")

# ------------------------------------------------------------------ tear down
t=$(date +%s.%N)
if [ "$KEEP" = 0 ]; then
  $COMPOSE down -v --remove-orphans >/dev/null 2>&1
  left=$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT" | wc -l)
  [ "$left" = 0 ] || { echo "testbed.sh: $left containers left behind" >&2; exit 7; }
else
  say "kept running; tear down with: $COMPOSE down -v"
fi
PHASE[teardown]=$(since "$t")

say "compose  release_sha256 $COMPOSE_SHA"
say "ltm demo release_sha256 $DEMO_SHA  (ltm demo --seed $SEED${DEMO_PARAMS:+ $DEMO_PARAMS})"
TIMES=""
for k in engine base_image wheels_and_image compose_up_job key_check networks ltm_demo teardown; do TIMES+="$k ${PHASE[$k]}s, "; done
say "time: ${TIMES}total $(since "$T0")s"
if [ -z "$COMPOSE_SHA" ] || [ "$COMPOSE_SHA" != "$DEMO_SHA" ]; then
  echo "testbed.sh: FAIL: the compose release differs from ltm demo's" >&2; exit 8
fi
say "OK: the compose testbed released the same bytes as ltm demo --seed $SEED${DEMO_PARAMS:+ $DEMO_PARAMS}"

#!/usr/bin/env bash
# Mutation testing (mutmut) on the privacy- and correctness-critical modules, one at a time, at low
# CPU priority.  Arguments are passed to scripts/mutation.py (module paths, --json FILE, --children N).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v mutmut >/dev/null || { echo "mutmut is not installed: pip install -e '.[dev]'" >&2; exit 2; }
exec nice -n 10 python3 scripts/mutation.py "$@"

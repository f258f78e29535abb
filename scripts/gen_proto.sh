#!/usr/bin/env bash
# Regenerate the committed gRPC stubs from proto/ (the source of truth) into OUT (default: repo root).
# Usage: scripts/gen_proto.sh [OUT_DIR]     (needs grpcio-tools, from the dev extra)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-.}"
mkdir -p "$out"
python -m grpc_tools.protoc -Iproto --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" proto/ltm/v1/ltm.proto

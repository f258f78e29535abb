"""The committed gRPC stubs are what grpcio-tools generates from proto/ (CI freshness check)."""
import subprocess
import sys
from pathlib import Path

from tests.helpers.optional import require

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ["ltm_pb2.py", "ltm_pb2.pyi", "ltm_pb2_grpc.py"]


def test_stubs_match_proto(tmp_path):
    require("grpc_tools")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'proto'}", f"--python_out={tmp_path}",
                    f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}", str(ROOT / "proto/ltm/v1/ltm.proto")],
                   check=True)
    for name in GENERATED:
        fresh = (tmp_path / "ltm" / "v1" / name).read_bytes()
        committed = (ROOT / "ltm" / "v1" / name).read_bytes()
        assert fresh == committed, f"ltm/v1/{name} is stale: run scripts/gen_proto.sh and commit the result"

"""The committed generated code in common/proto matches proto/privadapt/v1.

Runs ``proto/generate.py --check`` on the real files, and shows on a temporary
copy that the check does fail when the .proto and the code disagree.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

pytest.importorskip("grpc_tools", reason="grpcio-tools is not installed (pip install -e '.[test]')")

GENERATE = REPO_ROOT / "proto" / "generate.py"
GENERATED = REPO_ROOT / "common" / "proto"


def run_check(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GENERATE), "--check", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def tmp_copy(tmp_path: Path) -> tuple[Path, Path]:
    """(proto root, generated dir): copies of the real ones, safe to edit."""
    proto_root = tmp_path / "proto"
    shutil.copytree(REPO_ROOT / "proto" / "privadapt", proto_root / "privadapt")
    out = tmp_path / "generated"
    out.mkdir()
    for path in GENERATED.glob("*_pb2*"):
        shutil.copy(path, out / path.name)
    return proto_root, out


def test_committed_generated_code_matches_the_proto() -> None:
    result = run_check()
    assert result.returncode == 0, result.stderr


def test_check_fails_when_the_proto_changes_without_regenerating(
    tmp_copy: tuple[Path, Path],
) -> None:
    proto_root, out = tmp_copy
    proto = proto_root / "privadapt" / "v1" / "federation.proto"
    text = proto.read_text()
    proto.write_text(text.replace("  bytes data = 3;\n", "  bytes data = 3;\n  bool sparse = 4;\n"))
    assert proto.read_text() != text
    result = run_check("--proto-root", proto_root, "--out", out)
    assert result.returncode == 1
    assert "differs: federation_pb2.py" in result.stderr
    assert "python proto/generate.py" in result.stderr


def test_check_fails_when_generated_code_is_edited_or_missing(
    tmp_copy: tuple[Path, Path],
) -> None:
    proto_root, out = tmp_copy
    grpc_module = out / "federation_pb2_grpc.py"
    grpc_module.write_text(grpc_module.read_text().replace("SubmitShare", "SubmitShares"))
    (out / "federation_pb2.pyi").unlink()
    result = run_check("--proto-root", proto_root, "--out", out)
    assert result.returncode == 1
    assert "differs: federation_pb2_grpc.py" in result.stderr
    assert "missing (not generated yet): federation_pb2.pyi" in result.stderr


def test_check_ignores_generator_version_stamps(tmp_copy: tuple[Path, Path]) -> None:
    """A newer grpcio-tools that only changes its version stamps does not make
    the committed code stale (see proto/generate.py)."""
    proto_root, out = tmp_copy
    module = out / "federation_pb2.py"
    text = module.read_text()
    stamped = text.replace("# Protobuf Python Version: ", "# Protobuf Python Version: 99.")
    assert stamped != text
    module.write_text(stamped)
    grpc_module = out / "federation_pb2_grpc.py"
    grpc_module.write_text(
        grpc_module.read_text().replace("GRPC_GENERATED_VERSION = '", "GRPC_GENERATED_VERSION = '9")
    )
    result = run_check("--proto-root", proto_root, "--out", out)
    assert result.returncode == 0, result.stderr


def test_generated_modules_import_as_privadapt_common_proto() -> None:
    from privadapt.common.proto import federation_pb2, federation_pb2_grpc

    assert federation_pb2.Tensor.__module__ == "privadapt.common.proto.federation_pb2"
    assert federation_pb2.DESCRIPTOR.package == "privadapt.v1"  # wire names unchanged
    assert "from privadapt.v1 " not in (GENERATED / "federation_pb2_grpc.py").read_text()
    services = set(federation_pb2.DESCRIPTOR.services_by_name)
    assert services == {"FederationService", "OperatorService"}
    assert hasattr(federation_pb2_grpc, "OperatorServiceStub")

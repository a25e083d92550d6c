"""Regenerate (or check) the Python code for the wire contract.

    python proto/generate.py            # rewrite common/proto/*_pb2*.py[i]
    python proto/generate.py --check    # exit 1 if the committed code is stale

The generated modules are committed (installing privadapt needs no protoc), so
this script is the only way they change, and ``tests/common/proto/test_proto_generated.py``
runs ``--check`` so a .proto edited without regenerating fails the test suite.

Why a post-processing step: protoc derives Python module paths from the .proto
paths, so ``proto/privadapt/v1/federation.proto`` yields the module
``privadapt.v1.federation_pb2`` and the generated ``_pb2_grpc`` / ``.pyi`` files
say ``from privadapt.v1 import federation_pb2``. The code is installed as
``privadapt.common.proto`` instead (DESIGN.md section 4), so every
``privadapt.v1`` module reference is rewritten to ``privadapt.common.proto``
and the files are placed flat in ``common/proto/``. The proto package name and
the descriptor file name stay ``privadapt.v1`` / ``privadapt/v1/...`` -- only
Python import paths change, the wire format does not.

``--check`` ignores the generator-version stamps (protobuf gencode version,
``GRPC_GENERATED_VERSION``): a newer grpcio-tools that produces the same code
apart from them does not make the committed code stale. Regenerating does
update them, and with them the minimum protobuf/grpcio runtime the generated
code accepts -- keep pyproject's lower bounds in step.

Requires grpcio-tools (the ``test`` extra).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import tempfile
from importlib import resources
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "proto"
OUT_DIR = REPO / "common" / "proto"
PROTO_PACKAGE = "privadapt/v1"  # protos under PROTO_ROOT/PROTO_PACKAGE
PYTHON_PACKAGE = "privadapt.common.proto"  # where their modules are installed
GENERATED_SUFFIXES = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")
HEADER = "# Generated from proto/{proto} by proto/generate.py; do not edit, regenerate.\n"

_V1_MODULE = re.compile(r"\bprivadapt\.v1\.(\w+_pb2)\b")
_V1_IMPORT = re.compile(r"^from privadapt\.v1 import ", re.MULTILINE)
# Generator-version stamps that --check does not compare (see module docstring).
_VERSION_STAMPS = (
    re.compile(r"^# Protobuf Python Version: .*$", re.MULTILINE),
    re.compile(
        r"(ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.\w+,)"
        r"\s*\d+,\s*\d+,\s*\d+,\s*'[^']*',"
    ),
    re.compile(r"^GRPC_GENERATED_VERSION = '[^']*'$", re.MULTILINE),
)


def _postprocess(text: str, proto: str) -> str:
    """Point the generated code's module references at privadapt.common.proto."""
    text = _V1_IMPORT.sub(f"from {PYTHON_PACKAGE} import ", text)
    text = _V1_MODULE.sub(rf"{PYTHON_PACKAGE}.\1", text)
    return HEADER.format(proto=proto) + text


def generate(proto_root: Path) -> dict[str, str]:
    """Run protoc on every .proto under ``proto_root/privadapt/v1``; return the
    post-processed files as {file name in common/proto: text}."""
    from grpc_tools import protoc  # imported here so --help works without it

    protos = sorted((proto_root / PROTO_PACKAGE).glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files under {proto_root / PROTO_PACKAGE}")
    well_known = resources.files("grpc_tools") / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "grpc_tools.protoc",
            f"-I{proto_root}",
            f"-I{well_known}",
            f"--python_out={tmp}",
            f"--grpc_python_out={tmp}",
            f"--pyi_out={tmp}",
            *(str(p.relative_to(proto_root)) for p in protos),
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed; see its message above")
        files: dict[str, str] = {}
        for path in sorted((Path(tmp) / PROTO_PACKAGE).iterdir()):
            proto = f"{PROTO_PACKAGE}/{path.name.split('_pb2')[0]}.proto"
            files[path.name] = _postprocess(path.read_text(encoding="utf-8"), proto)
    return files


def committed(out_dir: Path) -> dict[str, str]:
    """The generated files currently in ``out_dir``."""
    return {
        path.name: path.read_text(encoding="utf-8")
        for path in sorted(out_dir.iterdir())
        if path.name.endswith(GENERATED_SUFFIXES)
    }


def _without_version_stamps(text: str) -> str:
    for pattern in _VERSION_STAMPS:
        text = pattern.sub(lambda m: m.group(1) if m.groups() else "", text)
    return text


def differences(fresh: dict[str, str], current: dict[str, str]) -> list[str]:
    """Human-readable differences between a fresh generation and ``current``."""
    problems = [f"missing (not generated yet): {name}" for name in sorted(fresh.keys() - current)]
    problems += [
        f"stale (no .proto generates it): {name}" for name in sorted(current.keys() - fresh)
    ]
    for name in sorted(fresh.keys() & current.keys()):
        want, have = _without_version_stamps(fresh[name]), _without_version_stamps(current[name])
        if want != have:
            diff = difflib.unified_diff(
                have.splitlines(),
                want.splitlines(),
                f"committed/{name}",
                f"fresh/{name}",
                lineterm="",
                n=1,
            )
            problems.append(f"differs: {name}\n" + "\n".join(list(diff)[:40]))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare with a fresh generation instead of writing; exit 1 if stale",
    )
    parser.add_argument(
        "--proto-root",
        type=Path,
        default=PROTO_ROOT,
        help="include root holding privadapt/v1/*.proto (default: %(default)s)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=OUT_DIR,
        help="directory of the generated modules (default: %(default)s)",
    )
    args = parser.parse_args(argv)

    fresh = generate(args.proto_root)
    if args.check:
        problems = differences(fresh, committed(args.out))
        if problems:
            print(
                f"generated code in {args.out} does not match the .proto files in "
                f"{args.proto_root}:",
                file=sys.stderr,
            )
            print("\n".join(problems), file=sys.stderr)
            print("fix: run `python proto/generate.py` and commit the result", file=sys.stderr)
            return 1
        print(f"{len(fresh)} generated files in {args.out} are up to date")
        return 0

    args.out.mkdir(parents=True, exist_ok=True)
    for name in committed(args.out).keys() - fresh.keys():
        (args.out / name).unlink()  # a removed .proto leaves no orphan module
    for name, text in fresh.items():
        (args.out / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(fresh)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Generate the Python gRPC stubs (with type stubs) from protos/ into the wire package.

The stubs are committed so that every package installs without a protobuf compiler; this script
is the only way they are made. `--check` regenerates into a temporary folder and exits non-zero
when the committed files differ (CI runs it through tests/unit/test_contracts.py).

protoc names Python modules after the .proto paths (`craftai/v1/infer.proto` ->
`craftai.v1.infer_pb2`); the stubs live in `craftai_wire.v1` so that the services and the SDK share
them without the services importing the SDK (docs/ARCHITECTURE.md), and this script rewrites the
generated modules' imports and module names to that package. Service and message names on the
wire (`craftai.v1.InferService`) are the .proto package's and do not change.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = ROOT / "protos"
PROTO_DIR = Path("craftai") / "v1"  # the .proto files' folder under protos/, as protoc writes it
PACKAGE_DIR = Path("craftai_wire") / "v1"  # where the stubs live
OUT_ROOT = ROOT / "clients" / "wire" / "src"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
INIT_TEXT = '"""Generated gRPC stubs for protos/craftai/v1 (tools/gen_protos.py; never edit by hand)."""\n'


def _generate(out_root: Path) -> None:
    from grpc_tools import protoc  # build-time tool, not a runtime dependency

    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PROTO_DIR).glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files under {PROTO_ROOT / PROTO_DIR}")
    bindir = Path(sys.executable).parent
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"--python_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--plugin=protoc-gen-mypy={bindir / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={bindir / 'protoc-gen-mypy_grpc'}",
        f"--mypy_out={out_root}",
        f"--mypy_grpc_out={out_root}",
        *protos,
    ]
    # The mypy plugins print a line per file to stderr; keep them out of CI logs unless protoc fails.
    with tempfile.TemporaryFile() as noise:
        saved = os.dup(2)
        os.dup2(noise.fileno(), 2)
        try:
            code = protoc.main(args)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        if code != 0:
            noise.seek(0)
            sys.stderr.write(noise.read().decode(errors="replace"))
            raise SystemExit("protoc failed")
    _relocate(out_root)
    (out_root / PACKAGE_DIR / "__init__.py").write_text(INIT_TEXT)


def _relocate(out_root: Path) -> None:
    """Move protoc's `craftai/v1/*` to `craftai_wire/v1/*`, pointing their imports and module names there."""
    old, new = ".".join(PROTO_DIR.parts), ".".join(PACKAGE_DIR.parts)
    target = out_root / PACKAGE_DIR
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted((out_root / PROTO_DIR).iterdir()):
        text = path.read_text()
        text = text.replace(f"from {old} import ", f"from {new} import ")
        text = re.sub(rf"'{re.escape(old)}\.(\w+_pb2(?:_grpc)?)'", rf"'{new}.\1'", text)  # module names only
        (target / path.name).write_text(text)
    shutil.rmtree(out_root / PROTO_DIR.parts[0])


def _generated_files(root: Path) -> set[str]:
    folder = root / PACKAGE_DIR
    if not folder.is_dir():
        return set()
    return {p.name for p in folder.iterdir() if p.name.endswith(GENERATED_SUFFIXES) or p.name == "__init__.py"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed stubs are out of date")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        _generate(fresh)
        made, committed = _generated_files(fresh), _generated_files(OUT_ROOT)
        if options.check:
            differ = sorted(
                name
                for name in made | committed
                if name not in made
                or name not in committed
                or not filecmp.cmp(fresh / PACKAGE_DIR / name, OUT_ROOT / PACKAGE_DIR / name, shallow=False)
            )
            if differ:
                print("stubs out of date (run: python tools/gen_protos.py): " + ", ".join(differ), file=sys.stderr)
                return 1
            print(f"stubs up to date ({len(made)} files)")
            return 0
        target = OUT_ROOT / PACKAGE_DIR
        target.mkdir(parents=True, exist_ok=True)
        for name in committed - made:
            (target / name).unlink()
        for name in sorted(made):
            shutil.copyfile(fresh / PACKAGE_DIR / name, target / name)
        print(f"wrote {len(made)} files to {target.relative_to(ROOT)}")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())

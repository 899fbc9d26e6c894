"""Rewrite every generated file the project commits.

Usage: python tools/generate.py [--check] [--out DIR]

With --out the files are written below DIR instead of the repository (the drift test
compares that copy with the committed one). --check exits 1 and names the stale files.
"""

from __future__ import annotations

import argparse
import filecmp
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"
PROTO_PACKAGE = Path("pinctl/proto")


def generate_protos(out: Path) -> list[Path]:
    """Compile the .proto files into message and gRPC stubs with grpcio-tools."""
    import grpc_tools
    from grpc_tools import protoc

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    sources = sorted((SRC / PROTO_PACKAGE).glob("*.proto"))
    target = out / "src"
    (target / PROTO_PACKAGE).mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{SRC}",
        f"-I{well_known}",
        f"--python_out={target}",
        f"--pyi_out={target}",
        f"--grpc_python_out={target}",
        *[str(s.relative_to(SRC)) for s in sources],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    return sorted(
        p.relative_to(out) for p in (target / PROTO_PACKAGE).iterdir() if p.suffix in {".py", ".pyi"}
    )


GENERATORS: dict[str, Callable[[Path], list[Path]]] = {
    "protos": generate_protos,
}


def generate_all(out: Path) -> list[Path]:
    written: list[Path] = []
    for generator in GENERATORS.values():
        written.extend(generator(out))
    return written


def stale_files(fresh_root: Path, written: list[Path]) -> list[Path]:
    return [
        rel
        for rel in written
        if not (REPO / rel).exists() or not filecmp.cmp(fresh_root / rel, REPO / rel, shallow=False)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale files, change nothing")
    parser.add_argument("--out", type=Path, help="write below this folder instead")
    opts = parser.parse_args(argv)
    if opts.out:
        generate_all(opts.out)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        written = generate_all(fresh)
        stale = stale_files(fresh, written)
        if opts.check:
            for rel in stale:
                print(f"stale: {rel} (run: python tools/generate.py)", file=sys.stderr)
            return 1 if stale else 0
        for rel in stale:
            (REPO / rel).parent.mkdir(parents=True, exist_ok=True)
            (REPO / rel).write_bytes((fresh / rel).read_bytes())
            print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

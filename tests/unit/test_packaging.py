"""The wheel ships what pinctl reads at run time or documents itself with: the generated gRPC
stubs, the .proto sources they were generated from, and the shell code of the completions.

The wheel is built for real (pip, offline, no build isolation) from a copy of the files a
build reads, so nothing but pyproject.toml decides what goes in: no VCS, no leftover build/.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "pinctl"
# What `pip wheel .` reads besides the package: the project file, the readme, the data files.
BUILD_INPUTS = ("pyproject.toml", "README.md", "src", "completions", "man")


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(work / "dist"), str(source)],
        capture_output=True, text=True, timeout=120,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (work / "dist").glob("pinctl-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def shipped_as(paths: list[Path]) -> set[str]:
    """Where files of src/pinctl sit in the wheel; there must be some, or the test proves nothing."""
    assert paths
    return {path.relative_to(PACKAGE.parent).as_posix() for path in paths}


def test_wheel_ships_the_proto_sources(wheel_files: set[str]) -> None:
    wanted = shipped_as(sorted((PACKAGE / "proto").glob("*.proto")))
    assert wanted <= wheel_files, sorted(wanted - wheel_files)


def test_wheel_ships_the_generated_stubs(wheel_files: set[str]) -> None:
    stubs = [p for pattern in ("*_pb2.py", "*_pb2.pyi", "*_pb2_grpc.py") for p in (PACKAGE / "proto").glob(pattern)]
    wanted = shipped_as(stubs)
    assert wanted <= wheel_files, sorted(wanted - wheel_files)


def test_wheel_ships_the_completion_shell_code(wheel_files: set[str]) -> None:
    wanted = shipped_as(sorted((PACKAGE / "completion" / "shell").iterdir()))
    assert wanted <= wheel_files, sorted(wanted - wheel_files)

"""Every Python file of the project stays under 600 lines, tests and tools too (the generated
gRPC stubs aside): a file past it is split, by what its parts are about."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 600


def too_long(root: Path = ROOT) -> list[str]:
    found = []
    for top in ("src", "tests", "tools", "bench"):
        for path in sorted((root / top).rglob("*.py")):
            if "proto" in path.relative_to(root).parts[:3] or ".venv" in path.parts:
                continue
            lines = path.read_text().count("\n")
            if lines > LIMIT:
                found.append(f"{path.relative_to(root)}: {lines} lines")
    return found


def test_no_python_file_passes_600_lines() -> None:
    assert too_long() == []


def test_a_file_past_the_limit_is_named(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_big.py").write_text("x = 1\n" * (LIMIT + 1))
    (tmp_path / "tests" / "test_small.py").write_text("x = 1\n" * LIMIT)
    assert too_long(tmp_path) == [f"tests/test_big.py: {LIMIT + 1} lines"]

"""Everything in pinctl and its tests is type-annotated and type-checks, with no needless
`# type: ignore` (pyproject.toml [tool.mypy]); this fails when it stops doing so."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_finds_no_errors() -> None:
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr

"""Generated files are committed; this fails when they drift from their generator."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_files_match_their_generator() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "generate.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr

"""pinctl-cri-relay's own Go tests (cri-relay/*_test.go: the answer rewrite and the pin cache),
go vet, and gofmt, run with Debian's Go as scripts/build-relay does."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import engine_unavailable

RELAY_SOURCES = Path(__file__).resolve().parents[2] / "cri-relay"


def go(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("go") is None or not Path("/usr/share/gocode/src/google.golang.org/grpc").is_dir():
        engine_unavailable("Go or grpc-go missing: apt-get install golang-go golang-google-grpc-dev")
    env = {**os.environ, "GOPATH": "/usr/share/gocode", "GO111MODULE": "off", "GOFLAGS": "-trimpath",
           "GOCACHE": os.environ.get("GOCACHE", str(Path.home() / ".cache" / "pinctl-go-build"))}
    return subprocess.run(["go", *args], cwd=RELAY_SOURCES, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command", [("vet", "."), ("test", "-count=1", ".")], ids=["vet", "test"])
def test_go(command: tuple[str, ...]) -> None:
    result = go(*command)
    assert result.returncode == 0, result.stdout + result.stderr


def test_gofmt() -> None:
    go("version")  # Go present, or the same skip / failure as above
    result = subprocess.run(["gofmt", "-l", "."], cwd=RELAY_SOURCES, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr

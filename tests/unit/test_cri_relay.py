"""pinctl-cri-relay's own Go tests (cri-relay/*_test.go: the answer rewrite, the pin cache, and
large messages through a real grpc-go client, relay and upstream, with the race detector), go
vet, and gofmt, run with the Go and the environment scripts/build-relay builds with (`--run`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import engine_unavailable

BUILD_RELAY = Path(__file__).resolve().parents[2] / "scripts" / "build-relay"
NO_GO = 3  # build-relay's exit code when no Go new enough for cri-relay/go.mod is found


def go_run(*args: str) -> subprocess.CompletedProcess[str]:
    """args in cri-relay/, with the Go (and its gofmt) that scripts/build-relay picks."""
    result = subprocess.run([str(BUILD_RELAY), "--run", *args], capture_output=True, text=True, timeout=600)
    if result.returncode == NO_GO:
        engine_unavailable(result.stderr.strip())
    return result


@pytest.mark.parametrize("command", [("go", "vet", "."), ("go", "test", "-race", "-count=1", ".")],
                         ids=["vet", "test-race"])
def test_go(command: tuple[str, ...]) -> None:
    result = go_run(*command)
    assert result.returncode == 0, result.stdout + result.stderr


def test_gofmt() -> None:
    result = go_run("gofmt", "-l", ".")
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


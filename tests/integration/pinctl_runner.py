"""Run the real pinctl CLI against a harness daemon, as an operator's shell would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.harness.containerd import ContainerdDaemon


def pinctl(daemon: ContainerdDaemon, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "CONTAINERD_ADDRESS": daemon.address, "PINCTL_CONTAINERD_CONFIG": str(daemon.config_path)}
    full_env.pop("CONTAINERD_NAMESPACE", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "pinctl", *args], capture_output=True, text=True, env=full_env, timeout=60
    )


def pinctl_json(daemon: ContainerdDaemon, *args: str, expect: int = 0) -> dict[str, Any]:
    result = pinctl(daemon, *args, "-o", "json")
    assert result.returncode == expect, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]

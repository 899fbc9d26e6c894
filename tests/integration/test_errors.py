"""Faults an operator meets: each is one line on stderr with the fix, a documented exit code, no traceback."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.containerd import ContainerdDaemon
from tests.integration.pinctl_runner import assert_one_line_error, pinctl

PINCTL = [sys.executable, "-m", "pinctl"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CONTAINERD_")}
    return subprocess.run([*PINCTL, *args], capture_output=True, text=True, env={**clean, **(env or {})}, timeout=60)


def test_missing_socket(tmp_path: Path) -> None:
    sock = tmp_path / "nothing.sock"
    result = run("ls", "--address", str(sock))
    assert_one_line_error(result, 1, str(sock), "does not exist", "--address")


def test_missing_default_socket_names_the_env_var(tmp_path: Path) -> None:
    result = run("pin", "example.test/a:1", env={"CONTAINERD_ADDRESS": str(tmp_path / "x.sock")})
    assert_one_line_error(result, 1, "x.sock", "CONTAINERD_ADDRESS")


def test_not_a_socket(tmp_path: Path) -> None:
    plain = tmp_path / "file"
    plain.write_text("")
    assert_one_line_error(run("ls", "--address", str(plain)), 1, str(plain), "is not a socket")


@pytest.mark.parametrize("args", [["ls", "--address"], ["check", "--runtime-endpoint"]])
def test_a_killed_daemon_is_said_as_briefly_as_a_stopped_one(tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "dead.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.close()  # the file stays, nobody listens: what a killed daemon leaves
    killed = run(*args, str(path))
    assert_one_line_error(killed, 1, f"nothing listens on {path}", "running?", args[-1])
    assert "gRPC" not in killed.stderr and "FAILED_PRECONDITION" not in killed.stderr
    path.unlink()  # what a daemon that stopped cleanly leaves: nothing
    stopped = run(*args, str(path))
    assert_one_line_error(stopped, 1, str(path), "does not exist")
    assert len(killed.stderr) <= len(stopped.stderr), (killed.stderr, stopped.stderr)


def test_daemon_not_answering_times_out(mute_socket: Path) -> None:
    result = run("ls", "--address", str(mute_socket), "--timeout", "0.5")
    assert_one_line_error(result, 1, str(mute_socket), "did not answer within 0.5s", "--timeout")


def test_socket_that_is_not_containerd(grpc_without_services: Path) -> None:
    result = run("ls", "--address", str(grpc_without_services))
    assert_one_line_error(result, 1, str(grpc_without_services), "does not speak containerd's API", "right socket")


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is needed to drop root's powers")
def test_permission_denied_tells_to_run_as_root(containerd17: ContainerdDaemon) -> None:
    sock = Path(containerd17.address)
    stat = sock.stat()
    os.chown(sock, 65534, 65534)
    os.chmod(sock, 0o600)
    try:
        # Root without CAP_DAC_OVERRIDE meets file permissions like any other user.
        argv = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", *PINCTL, "ls", "--address", str(sock)]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    finally:
        os.chown(sock, stat.st_uid, stat.st_gid)
        os.chmod(sock, stat.st_mode & 0o777)
    assert_one_line_error(result, 1, "permission denied", str(sock), "root")


@pytest.mark.parametrize(
    "args, needle",
    [
        (["lss"], "no such command 'lss'; did you mean ls?"),
        (["pinn"], "no such command 'pinn'; did you mean pin?"),
        (["upin", "x"], "did you mean pin or unpin?"),
        (["ls", "--unpined"], "no such option '--unpined'; did you mean --unpinned?"),
        (["ls", "-o", "yaml"], "not 'yaml'"),
        (["ls", "--timeout", "-1"], "--timeout"),
        (["pin"], "Missing argument"),
        (["ls", "--bogus"], "--bogus"),  # click words it "No such option" with or without a colon
    ],
)
def test_usage_errors_exit_2_with_one_line(args: list[str], needle: str) -> None:
    result = run(*args, env={"CONTAINERD_ADDRESS": "/nonexistent.sock"})
    assert_one_line_error(result, 2, needle, "--help")
    assert "?)" not in result.stderr and "--quiet" not in result.stderr  # one clause; no far-fetched guess


def test_unknown_namespace_on_pin(containerd17: ContainerdDaemon) -> None:
    result = pinctl(containerd17, "pin", "-n", "nope", "example.test/a:1")
    assert_one_line_error(result, 2, "namespace nope does not exist", "-n")

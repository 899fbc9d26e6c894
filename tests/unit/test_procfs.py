"""What pinctl reads of other processes: flags as Go programs take them, start times, executables, cri-dockerd's
own words; and a signal sent only to the process that was checked."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator

import pytest

from pinctl.backends import cri_dockerd, procfs


@pytest.mark.parametrize(("argv", "flags"), [
    (["cri-dockerd", "--pinned-images=a:1,b", "--pinned-images", "c*"], {"--pinned-images": "a:1,b,c*"}),
    (["pinctl", "cri-proxy", "-r", "unix:///run/x.sock", "--listen", "/run/p.sock"],
     {"-r": "unix:///run/x.sock", "--listen": "/run/p.sock"}),
    (["kubelet", "--v", "--config=/etc/k.yaml"], {"--v": "true", "--config": "/etc/k.yaml"}),
])
def test_flags_are_read_in_both_forms(argv: list[str], flags: dict[str, str]) -> None:
    assert procfs.parse_flags(argv) == flags


def test_a_socket_path_is_the_same_with_or_without_its_scheme() -> None:
    assert procfs.socket_path("unix:///run/a.sock") == procfs.socket_path("/run/a.sock") == "/run/a.sock"


def test_this_process_is_found_and_started_before_now() -> None:
    me = os.getpid()
    assert me in procfs.pids() and procfs.cmdline(me)
    started = procfs.started_at(me)
    assert started is not None and started.timestamp() > 0
    assert procfs.socket_owner("/nonexistent/pinctl-test.sock") is None


def test_a_start_time_is_read_to_the_clock_tick_not_the_second() -> None:
    # btime alone is whole seconds: gc plan compares the kubelet's start with image records.
    import subprocess
    import time

    # Bounded by order, not by a speed: after the clock read before the child, before the one
    # after its start was read. Whole seconds (btime) would put it up to a second early; the slack
    # is the clock tick and /proc/uptime's hundredths.
    before = time.time()
    child = subprocess.Popen(["sleep", "5"])
    try:
        started = procfs.started_at(child.pid)
        after = time.time()
    finally:
        child.kill()
        child.wait()
    assert started is not None and before - 0.03 <= started.timestamp() <= after + 0.02, (before, started, after)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A `sleep 60` of its own (Popen returns once it has exec'd), killed after the test."""
    child = subprocess.Popen(["sleep", "60"])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def a_dead_pid() -> tuple[int, int]:
    """The pid and start of a process that ran and was reaped (a pid not reused so soon; if it
    were, its start would differ)."""
    child = subprocess.Popen(["true"])
    ticks = procfs.start_ticks(child.pid)
    child.wait()
    assert ticks is not None
    return child.pid, ticks


def test_a_start_in_ticks_names_one_process(sleeper: subprocess.Popen[bytes]) -> None:
    ticks = procfs.start_ticks(sleeper.pid)
    assert ticks is not None and ticks == procfs.start_ticks(sleeper.pid)
    # This process started before the sleep (Python and pytest were loaded in between).
    mine = procfs.start_ticks(os.getpid())
    assert mine is not None and mine < ticks
    started = procfs.started_at(sleeper.pid)
    assert started is not None  # the same field started_at reads
    assert procfs.start_ticks(a_dead_pid()[0]) is None


def test_a_process_is_signalled_while_it_is_the_one_that_started_then(sleeper: subprocess.Popen[bytes]) -> None:
    ticks = procfs.start_ticks(sleeper.pid)
    assert ticks is not None
    procfs.signal_exactly(sleeper.pid, ticks, signal.SIGTERM)
    assert sleeper.wait() == -signal.SIGTERM


def test_a_pid_with_another_start_is_not_signalled(sleeper: subprocess.Popen[bytes]) -> None:
    ticks = procfs.start_ticks(sleeper.pid)
    assert ticks is not None
    with pytest.raises(ProcessLookupError):
        procfs.signal_exactly(sleeper.pid, ticks - 1, signal.SIGTERM)
    assert sleeper.poll() is None and procfs.start_ticks(sleeper.pid) == ticks


@pytest.mark.parametrize("pid", [0, -1])
def test_no_group_and_no_broadcast_is_signalled(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        procfs.signal_exactly(pid, 0, 0)


def test_a_process_gone_is_not_signalled() -> None:
    pid, ticks = a_dead_pid()
    with pytest.raises(ProcessLookupError):
        procfs.signal_exactly(pid, ticks, signal.SIGTERM)


@pytest.mark.parametrize("failure", [OSError(errno.ENOSYS, "no pidfd_open"), OSError(errno.EPERM, "seccomp"), None])
def test_without_pidfds_the_start_is_checked_before_kill(
        sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch, failure: OSError | None) -> None:
    if failure is None:
        monkeypatch.delattr(os, "pidfd_open")
    else:
        def refused(pid: int, flags: int = 0) -> int:
            raise failure
        monkeypatch.setattr(os, "pidfd_open", refused)
    ticks = procfs.start_ticks(sleeper.pid)
    assert ticks is not None
    with pytest.raises(ProcessLookupError):
        procfs.signal_exactly(sleeper.pid, ticks + 1, signal.SIGTERM)
    assert sleeper.poll() is None
    procfs.signal_exactly(sleeper.pid, ticks, signal.SIGTERM)
    assert sleeper.wait() == -signal.SIGTERM


def test_what_a_process_runs_is_its_executable(sleeper: subprocess.Popen[bytes]) -> None:
    sleep = shutil.which("sleep")
    assert sleep is not None
    assert procfs.read_exe(sleeper.pid) == (os.path.realpath(sleep), None)
    assert procfs.read_exe(sleeper.pid)[0] == os.path.realpath(sleep)
    assert procfs.read_exe(a_dead_pid()[0]) == (None, "it is gone")
    assert procfs.read_exe(a_dead_pid()[0])[0] is None
    if procfs.stat_name(2) == "kthreadd":  # the kernel's threads are seen from this PID namespace
        assert procfs.read_exe(2) == (None, "it runs no executable (a kernel thread, or a process exiting)")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to become another user")
def test_another_users_process_cannot_be_told_without_ptrace_access(sleeper: subprocess.Popen[bytes]) -> None:
    """As nobody, root's sleep cannot be read: the reason says so, and the signal is refused."""
    ticks = procfs.start_ticks(sleeper.pid)
    assert ticks is not None
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the forked child reports through the pipe)
        code = 1
        try:
            os.close(reading)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                procfs.signal_exactly(sleeper.pid, ticks, signal.SIGTERM)
                refused = "signalled"
            except PermissionError:
                refused = "refused"
            os.write(writing, repr((procfs.read_exe(sleeper.pid), procfs.start_ticks(sleeper.pid), refused)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(writing)
    with os.fdopen(reading, "rb") as pipe:
        said = pipe.read().decode()
    assert os.waitpid(child, 0)[1] == 0
    assert said == repr(((None, procfs.NO_PTRACE), ticks, "refused"))
    assert sleeper.poll() is None


@pytest.mark.parametrize(("text", "version"), [
    ("cri-dockerd 0.4.3 (4b5e6fd)\n", "0.4.3"),
    ("cri-dockerd v0.4.10 (HEAD)", "0.4.10"),
    ("cri-dockerd dev (HEAD)", ""),
    ("", ""),
])
def test_cri_dockerd_says_its_release(text: str, version: str) -> None:
    assert cri_dockerd.parse_version(text) == version


def test_what_a_cri_dockerd_can_pin_follows_its_release_or_its_help() -> None:
    old_help = "Flags:\n      --docker-endpoint string\n      --pod-infra-container-image string\n"
    new_help = old_help + "      --pinned-images strings\n      --pinned-image-labels strings\n"
    old = cri_dockerd.describe_process(7, ["cri-dockerd", "--pod-infra-container-image", "x/pause:1"], "0.4.3", old_help)
    assert old.has_selectors is False and old.sandbox_image == "x/pause:1" and old.describe() == "cri-dockerd 0.4.3"
    dev = cri_dockerd.describe_process(8, ["cri-dockerd", "--pinned-images=a:1"], "", new_help)
    assert dev.has_selectors is True and dev.pinned_images == ("a:1",) and dev.describe() == "cri-dockerd"
    unknown = cri_dockerd.describe_process(9, ["cri-dockerd"], "0.4.9", "")
    assert unknown.has_selectors is True  # no help text: the release decides
    assert cri_dockerd.describe_process(9, ["cri-dockerd"], "", "").has_selectors is None

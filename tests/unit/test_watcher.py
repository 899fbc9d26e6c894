"""The watcher's loop without containerd: reloads asked for by SIGHUP or by a changed config file
take the same path, also while the watcher waits out a back-off. Events and syncs are tested
against real containerd (tests/integration/test_watch.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from pinctl.errors import ConfigError, EngineUnreachable
from pinctl.pins.policy import compile_policy
from pinctl.service import configfiles
from pinctl.watch import watcher as watcher_module
from pinctl.watch.watcher import Watcher, WatchSetup

# A back-off far beyond every deadline here: what ends it early is a reload or a stop, never time.
HOUR = 3600.0


class Logged:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, level: str, msg: str, **fields: Any) -> None:
        self.lines.append((msg, fields))

    def count(self, msg: str) -> int:
        return sum(line == msg for line, _ in self.lines)

    def wait(self, msg: str, count: int = 1, timeout: float = 60.0) -> None:
        """Until msg was logged count times; the deadline only ends a test that would hang."""
        deadline = time.monotonic() + timeout
        while self.count(msg) < count:
            assert time.monotonic() < deadline, f"no {msg!r}: {self.lines}"
            time.sleep(0.01)


def unreachable() -> Any:
    raise EngineUnreachable("no socket at /run/c.sock")


def setup_loader(config: Path) -> Callable[[], WatchSetup]:
    def load() -> WatchSetup:
        if "broken" in config.read_text():
            raise ConfigError(f"{config}:1: unknown key 'broken'")
        return WatchSetup(unreachable, compile_policy([]), "/run/c.sock", unreachable, unreachable,
                          (str(config),))
    return load


@pytest.fixture
def running(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A watcher that cannot reach containerd, waiting out an hour's back-off; its config polled
    every 0.05 s, or as the test's parameter says."""
    monkeypatch.setattr(configfiles, "POLL_SECONDS", getattr(request, "param", 0.05))
    monkeypatch.setattr(configfiles, "SETTLE_SECONDS", 0.01)
    monkeypatch.setattr(watcher_module, "BACKOFF_FIRST", HOUR)
    monkeypatch.setattr(watcher_module, "BACKOFF_MAX", HOUR)
    config = tmp_path / "config.toml"
    config.write_text("# ok\n")
    log = Logged()
    watcher = Watcher(setup_loader(config), log, prune=False)
    done: list[int] = []
    thread = threading.Thread(target=lambda: done.append(watcher.run()), daemon=True)
    thread.start()
    log.wait("containerd unreachable, retrying")
    assert log.lines[-1][1]["retry_in"] == "3600s"
    yield watcher, log, config, done
    watcher.stop()
    thread.join(60)


def test_a_reload_asked_for_during_a_back_off_is_done_at_once(running: Any) -> None:
    """Not after the back-off: it is an hour, and the wait for the reload ends long before."""
    watcher, log, _config, _done = running
    watcher.request_reload()
    log.wait("config reloaded")


def test_a_changed_file_reloads_and_a_broken_one_is_counted_and_kept(running: Any) -> None:
    watcher, log, config, _done = running
    config.write_text("# still ok, but changed\n")
    log.wait("config reloaded")
    assert [fields for msg, fields in log.lines if msg == "config changed, reloading"] == [{"path": str(config)}]
    config.write_text("broken = 1\n")
    log.wait("config reload failed, keeping the previous one")
    assert dict(watcher.state.reloads) == {"ok": 1, "failed": 1} and not watcher.state.last_reload_ok
    assert watcher.state.sync_errors["config-reload"] == 1
    config.write_text("# fixed\n")
    log.wait("config reloaded", 2)
    assert watcher.state.last_reload_ok


@pytest.mark.parametrize("running", [HOUR], indirect=True)
def test_stop_ends_the_loop_and_the_poll_at_once(running: Any) -> None:
    """The back-off and the config poll both wait an hour: only stop() can end them in time."""
    watcher, log, _config, done = running
    watcher.stop()
    deadline = time.monotonic() + 60
    while not done or any(t.name == "pinctl-config-poll" for t in threading.enumerate()):
        assert time.monotonic() < deadline, (done, [t.name for t in threading.enumerate()])
        time.sleep(0.01)
    assert done == [0] and log.lines[-1][0] == "stopped"


class LockedStream:
    """A stream whose cancel() takes a lock the main thread may hold, as gRPC's channel does."""

    def __init__(self, lock: Any) -> None:
        self.lock = lock
        self.cancelled = threading.Event()
        self.deadlocked = False

    def cancel(self) -> None:
        if not self.lock.acquire(timeout=5.0):
            self.deadlocked = True
            return
        self.lock.release()
        self.cancelled.set()

    def __iter__(self) -> Any:
        return iter(())


def test_a_stop_asked_while_the_main_thread_holds_grpcs_lock_still_cancels_the_streams(tmp_path: Path) -> None:
    """SIGTERM's handler runs on the main thread, which may be inside a gRPC call holding its
    channel's lock: stop() must not take that lock on the same thread (it never returned)."""
    config = tmp_path / "config.toml"
    config.write_text("# ok\n")
    watcher = Watcher(setup_loader(config), Logged(), prune=False)
    lock = threading.Lock()
    stream = LockedStream(lock)
    watcher._streams = [stream]
    with lock:  # the main thread in a gRPC call, as the handler interrupts it
        watcher.stop()
        assert not stream.cancelled.is_set()
    assert stream.cancelled.wait(10.0) and not stream.deadlocked

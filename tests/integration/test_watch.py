"""sync --watch as a subprocess against a private containerd (1.7, then 2.1): events, restarts, SIGHUP, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import cri, images
from tests.harness.containerd import ContainerdDaemon
from tests.harness.docker import DockerDaemon, load_images_docker
from tests.integration.conftest import one_engine

PIN = "io.cri-containerd.pinned"
LoadImages = Callable[..., list[images.ImageInfo]]
# Only ends a test that would hang: the watcher has no periodic sync on containerd, so a label
# that comes at all came from an event (bench/bench_watch.py measures the latency).
DEADLINE = 60.0
# pinctl with the watcher's safety net (the loop's wait for the next event, 5 s) an hour long:
# a watcher run so that stops within a test's deadline was woken by its signal, not by that wait.
# SIGUSR1 makes it write every thread's stack to its log: what held a stop up, when one is.
PATIENT = ("import faulthandler, signal, sys; faulthandler.register(signal.SIGUSR1, all_threads=True); "
           "import pinctl.watch.watcher as watcher; watcher.POLL_SECONDS = 3600.0; "
           "sys.argv[0] = 'pinctl'; from pinctl.cli import main; main()")


def pinctl_argv(patient: bool = False) -> list[str]:
    return [sys.executable, "-c", PATIENT] if patient else [sys.executable, "-m", "pinctl"]


class WatchProcess:
    def __init__(self, daemon: ContainerdDaemon, config: Path, *extra: str, env: dict[str, str] | None = None,
                 log_path: Path | None = None, patient: bool = False) -> None:
        env = {**os.environ, "CONTAINERD_ADDRESS": daemon.address, "PINCTL_CONFIG": str(config), **(env or {})}
        env.pop("CONTAINERD_NAMESPACE", None)
        self.log_path = log_path or config.parent / "watch.log"
        self.proc = subprocess.Popen(
            [*pinctl_argv(patient), "sync", "--watch", "--log-format", "json", *extra],
            env=env, stdout=subprocess.DEVNULL, stderr=open(self.log_path, "w"),
        )

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line.strip()]

    def wait_log(self, msg: str, count: int = 1, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while sum(line["msg"] == msg for line in self.lines()) < count:
            assert self.proc.poll() is None, self.log_path.read_text()
            assert time.monotonic() < deadline, f"no {msg!r} in time: {self.log_path.read_text()}"
            time.sleep(0.05)

    def terminate(self) -> tuple[int, float]:
        """SIGTERM; the exit code and the seconds it took (for reports: no test asserts them). The
        deadline only ends a hang: what could hold the stop up is shown held by the tests."""
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGUSR1)  # a patient watcher's stacks, into its log
            time.sleep(1)
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"not stopped 60 s after SIGTERM:\n{self.log_path.read_text()[-6000:]}") from None
        return code, time.monotonic() - start


def watchers(tmp_path: Path) -> Iterator[Callable[..., WatchProcess]]:
    """For a fixture: start(daemon, policy, *extra) runs a watcher until its first full sync;
    every one still running is killed afterwards."""
    started: list[WatchProcess] = []

    def start(daemon: ContainerdDaemon, policy: str, *extra: str, patient: bool = False) -> WatchProcess:
        config = tmp_path / "config.toml"
        config.write_text(policy)
        process = WatchProcess(daemon, config, *extra, patient=patient)
        started.append(process)
        process.wait_log("full sync")
        return process

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.proc.kill()
            process.proc.wait()


@pytest.fixture
def watch(daemon: ContainerdDaemon, tmp_path: Path) -> Iterator[Callable[..., WatchProcess]]:
    for start in watchers(tmp_path):
        yield lambda policy, *extra, patient=False: start(daemon, policy, *extra, patient=patient)


def labelled_within(daemon: ContainerdDaemon, ref: str, timeout: float = DEADLINE, value: str | None = "pinned",
                    namespace: str = "k8s.io") -> None:
    """Until ref's pin label is value; checked once more after the deadline, so a timeout of 0
    asks whether it is so now."""
    deadline = time.monotonic() + timeout
    while True:
        labels = {row.ref: row.labels for row in daemon.images(namespace)}
        if labels.get(ref, {}).get(PIN) == value:
            return
        assert time.monotonic() < deadline, f"{ref} labels {labels.get(ref)} after {timeout}s"
        time.sleep(0.05)


def load(daemon: ContainerdDaemon, tmp_path: Path, *recipes: images.ImageRecipe) -> None:
    archive = tmp_path / f"images-{time.monotonic_ns()}.tar"
    images.build_archive(archive, recipes)
    images.import_images(daemon, archive, "k8s.io", wait=False)


def test_new_and_retagged_images_are_pinned(daemon: ContainerdDaemon, watch: Callable[..., WatchProcess], tmp_path: Path) -> None:
    proc = watch('pinned_images = ["example.test/keep/*"]\n', patient=True)
    load(daemon, tmp_path, images.recipe("example.test/keep/app:1", seed="w1"), images.recipe("example.test/other:1", seed="w2"))
    labelled_within(daemon, "example.test/keep/app:1")
    daemon.ctr("images", "tag", "example.test/other:1", "example.test/keep/other:2")
    labelled_within(daemon, "example.test/keep/other:2")
    assert PIN not in {row.ref: row.labels for row in daemon.images()}["example.test/other:1"]
    # A label dropped (as a re-pull does) is put back.
    daemon.ctr("images", "label", "example.test/keep/app:1", f"{PIN}=")
    labelled_within(daemon, "example.test/keep/app:1")
    # Re-imported with new content under the same name: still pinned.
    before = {row.ref: row.digest for row in daemon.images()}["example.test/keep/app:1"]
    load(daemon, tmp_path, images.recipe("example.test/keep/app:1", seed="w1-v2"))
    labelled_within(daemon, "example.test/keep/app:1")
    assert {row.ref: row.digest for row in daemon.images()}["example.test/keep/app:1"] != before
    cri.wait_for(daemon.address, lambda imgs: any("example.test/keep/app:1" in i.repo_tags and i.pinned for i in imgs), 60)
    pinned = [line for line in proc.lines() if line["msg"] == "pinned"]
    assert {line["ref"] for line in pinned} >= {"example.test/keep/app:1", "example.test/keep/other:2"}
    # Patient: its loop's own wait is an hour, so a stop within terminate's deadline was SIGTERM's.
    assert proc.terminate()[0] == 0


def test_recovers_when_containerd_restarts(daemon: ContainerdDaemon, watch: Callable[..., WatchProcess], tmp_path: Path) -> None:
    proc = watch('pinned_images = ["example.test/keep/*"]\n')
    daemon.stop()
    proc.wait_log("containerd unreachable, retrying")
    daemon.start()
    proc.wait_log("full sync", count=2)
    load(daemon, tmp_path, images.recipe("example.test/keep/after:1", seed="w3"))
    labelled_within(daemon, "example.test/keep/after:1")
    assert proc.proc.poll() is None


def test_catches_up_on_what_happened_while_disconnected(daemon: ContainerdDaemon, watch: Callable[..., WatchProcess], tmp_path: Path) -> None:
    proc = watch('pinned_images = ["example.test/keep/*"]\n')
    daemon.stop()
    proc.wait_log("containerd unreachable, retrying")
    daemon.start()
    load(daemon, tmp_path, images.recipe("example.test/keep/meanwhile:1", seed="w4"))
    labelled_within(daemon, "example.test/keep/meanwhile:1")


@one_engine  # SIGHUP and a reload are pinctl's; labels per engine: the test above
def test_sighup_reloads_the_config(daemon: ContainerdDaemon, watch: Callable[..., WatchProcess], tmp_path: Path) -> None:
    load(daemon, tmp_path, images.recipe("example.test/later:1", seed="w5"))
    proc = watch('pinned_images = ["example.test/keep/*"]\n', patient=True)
    assert PIN not in {row.ref: row.labels for row in daemon.images()}["example.test/later:1"]
    (tmp_path / "config.toml").write_text('pinned_images = ["example.test/later:*"]\n')
    proc.proc.send_signal(signal.SIGHUP)
    proc.wait_log("config reloaded")
    labelled_within(daemon, "example.test/later:1")
    (tmp_path / "config.toml").write_text('pinned_images = ["a/*/b"]\n')
    proc.proc.send_signal(signal.SIGHUP)
    proc.wait_log("config reload failed, keeping the previous one")
    assert proc.proc.poll() is None
    assert proc.terminate()[0] == 0  # patient, as above: SIGTERM's stop


@one_engine  # the log's format and a signal: pinctl's own, whatever containerd it follows
def test_text_log_and_sigint(daemon: ContainerdDaemon, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('pinned_images = ["example.test/keep/*"]\n')
    env = {**os.environ, "CONTAINERD_ADDRESS": daemon.address, "PINCTL_CONFIG": str(config)}
    log = tmp_path / "watch.log"
    with open(log, "w") as stderr:
        # Patient (an hour's wait for the next event): a stop within the deadline is SIGINT's.
        proc = subprocess.Popen([*pinctl_argv(patient=True), "sync", "--watch"], env=env,
                                stdout=subprocess.PIPE, stderr=stderr, text=True)
    deadline = time.monotonic() + DEADLINE
    while " info full sync (" not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    err = log.read_text()
    assert proc.returncode == 0, err
    assert out == "" and err.rstrip().endswith("info stopped")


@one_engine  # refused before containerd is asked anything
def test_watch_and_dry_run_refused(daemon: ContainerdDaemon, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "pinctl", "sync", "--watch", "--dry-run", "--address", daemon.address],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "--watch and --dry-run" in result.stderr


def test_watch_follows_dockers_own_containerd_as_sync_does(
    containerd16: ContainerdDaemon, dockerd_containerd_store: DockerDaemon, tmp_path: Path,
    clean_docker: Callable[[DockerDaemon], DockerDaemon],
) -> None:
    """pinctl's containerd is one daemon (1.6 here); Docker keeps its images in another (the 1.7
    one, namespace moby). An image tagged there while the watcher runs gets its pin."""
    docker = clean_docker(dockerd_containerd_store)
    moby = docker.containerd
    assert moby is not None and moby.address != containerd16.address
    config = tmp_path / "config.toml"
    config.write_text(f'pinned_images = ["example.test/dkw/*"]\ndocker_containerd_address = "{moby.address}"\n')
    load_images_docker(docker, tmp_path / "archives", [images.recipe("example.test/dkw-base:1", seed="dkw")])
    env = {"DOCKER_HOST": docker.host}
    process = WatchProcess(containerd16, config, env=env)
    try:
        process.wait_log("full sync")
        docker.docker("tag", "example.test/dkw-base:1", "example.test/dkw/app:1")
        labelled_within(moby, "example.test/dkw/app:1", namespace="moby")
        assert process.proc.poll() is None
    finally:
        process.proc.kill()
        process.proc.wait()
    # One-shot sync covers the same daemons: the same kind of image, tagged with no watcher.
    docker.docker("tag", "example.test/dkw-base:1", "example.test/dkw/two:1")
    once = subprocess.run([sys.executable, "-m", "pinctl", "sync"], capture_output=True, text=True,
                          env={**os.environ, **env, "CONTAINERD_ADDRESS": containerd16.address,
                               "PINCTL_CONFIG": str(config)})
    assert once.returncode == 0, once.stderr
    labelled_within(moby, "example.test/dkw/two:1", timeout=0, namespace="moby")


@one_engine  # pinctl's own connections; reconnecting per engine: the restart tests
def test_reloads_leave_no_connection_behind(daemon: ContainerdDaemon, watch: Callable[..., WatchProcess]) -> None:
    proc = watch('pinned_images = ["example.test/keep/*"]\n')
    fds = Path(f"/proc/{proc.proc.pid}/fd")

    def reload(times: int) -> int:
        before = sum(line["msg"] == "full sync" for line in proc.lines())
        for _ in range(times):
            proc.proc.send_signal(signal.SIGHUP)
            time.sleep(0.02)
        proc.wait_log("full sync", before + 1)
        time.sleep(0.5)  # let the last session settle
        return len(list(fds.iterdir()))

    settled = reload(10)
    reload(100)
    # A leak never comes back down; a session still being set up on a busy machine does.
    deadline = time.monotonic() + DEADLINE
    while len(list(fds.iterdir())) > settled + 2:
        assert time.monotonic() < deadline, (settled, proc.log_path.read_text()[-2000:])
        time.sleep(0.1)

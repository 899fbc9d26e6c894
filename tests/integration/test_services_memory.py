"""sync --watch's resident memory stays flat over image events (issue 23), at a scale the suite can
afford: bench/bench_services.py measures both services at 10,000 images.

The watcher runs as deployed (metrics served, the periodic check every second, so that its rounds
fall among the events). After a warm-up of events its VmRSS is read, then again after many more
events; the goal is the issue's: within 10%.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from pinctl.criproxy.pins import PinnedKeys, packed, settled
from pinctl.proto import images_pb2
from tests.harness import images, protowire
from tests.harness.containerd import ContainerdDaemon
from tests.integration.conftest import one_engine

IMAGES = 300
WARM_UP, EVENTS = 1500, 4500
GROWTH = 1.10
SERVICE = "/containerd.services.images.v1.Images/"
NAMESPACE = (("containerd-namespace", "k8s.io"),)


def rss_mib(pid: int) -> float:
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " "))


class Churn:
    """Image events through containerd's API, 64 calls in flight: new records (half of them
    names the policy covers, which the watcher labels), label updates, and the new ones deleted."""

    def __init__(self, address: str, names: list[str]) -> None:
        self.channel = grpc.insecure_channel(f"unix://{address}")
        self.names = names
        reply = self._call("Get", [images_pb2.GetImageRequest(name=names[0]).SerializeToString()])[0]
        self.target = images_pb2.GetImageResponse.FromString(reply).image.target
        self.rounds = 0

    def _call(self, method: str, requests: list[bytes]) -> list[bytes]:
        call = self.channel.unary_unary(SERVICE + method)
        replies: list[bytes] = []
        for start in range(0, len(requests), 64):
            futures = [call.future(r, metadata=NAMESPACE, timeout=30) for r in requests[start:start + 64]]
            replies += [future.result() for future in futures]
        return replies

    def events(self, count: int) -> None:
        for _ in range(0, count, 300):
            self._round(100)

    def _round(self, size: int) -> None:
        fresh = [f"example.test/{'mem-1new' if i % 2 else 'new'}-{self.rounds}-{i}:1" for i in range(size)]
        # The CRI plugin's label from the start: else its own update can follow the delete and make the record again.
        self._call("Create", [images_pb2.CreateImageRequest(image=images_pb2.Image(
            name=name, target=self.target, labels={"io.cri-containerd.image": "managed"})).SerializeToString()
            for name in fresh])
        updates = []
        for name in self.names[(self.rounds * size) % len(self.names):][:size]:
            request = images_pb2.UpdateImageRequest(image=images_pb2.Image(
                name=name, labels={"bench.example/tick": str(self.rounds)}, target=self.target))
            request.update_mask.paths.append("labels.bench.example/tick")
            updates.append(request.SerializeToString())
        self._call("Update", updates)
        self._call("Delete", [protowire.encode([(1, name)]) for name in fresh])
        self.rounds += 1

    def close(self) -> None:
        self.channel.close()


def settled_count(port: int, quiet: float = 1.5, timeout: float = 60) -> float:
    """The watcher's event count, once it has stopped moving."""
    deadline = time.monotonic() + timeout
    last, since = -1.0, time.monotonic()
    while time.monotonic() < deadline:
        seen = metric(port, "pinctl_image_events_total")
        if seen != last:
            last, since = seen, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return seen
        time.sleep(0.2)
    raise AssertionError(f"the watcher's event count still moves after {timeout}s")


@pytest.fixture
def watcher(daemon: ContainerdDaemon, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    archive = tmp_path / "images.tar"
    images.build_archive(archive, images.numbered_recipes(IMAGES, prefix="example.test/mem"))
    images.import_images(daemon, archive, "k8s.io")
    config = tmp_path / "config.toml"
    config.write_text('pinned_images = ["example.test/mem-1*"]\n')
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    log = tmp_path / "watch.log"
    env = {**os.environ, "CONTAINERD_ADDRESS": daemon.address, "PINCTL_CONFIG": str(config)}
    proc = subprocess.Popen([sys.executable, "-m", "pinctl", "sync", "--watch", "-n", "k8s.io", "--log-format", "json",
                             "--metrics-address", f"127.0.0.1:{port}", "--check-interval", "1",
                             "-r", f"unix://{daemon.address}"], env=env, stdout=subprocess.DEVNULL,
                            stderr=open(log, "w"))
    deadline = time.monotonic() + 30
    while not any(json.loads(line).get("msg") == "full sync" for line in log.read_text().splitlines()):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    yield proc, port
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)


@one_engine
def test_the_watchers_rss_stays_flat_over_image_events(daemon: ContainerdDaemon,
                                                        watcher: tuple[subprocess.Popen[bytes], int]) -> None:
    proc, port = watcher
    names = [row.ref for row in daemon.images() if row.ref.startswith("example.test/mem-")]
    churn = Churn(daemon.address, names)
    try:
        churn.events(WARM_UP)  # the interpreter's pools and gRPC's buffers reach their working size
        seen = settled_count(port)
        before = rss_mib(proc.pid)
        churn.events(EVENTS)
        assert settled_count(port) >= seen + EVENTS
        after = rss_mib(proc.pid)
    finally:
        churn.close()
    assert metric(port, "pinctl_last_check_timestamp_seconds") > 0  # check rounds ran among the events
    assert after <= GROWTH * before, f"VmRSS {before:.1f} MiB after {WARM_UP} events, {after:.1f} MiB after {EVENTS} more"


def test_a_read_equal_to_the_keys_held_keeps_them() -> None:
    held = settled(packed(PinnedKeys(frozenset({"sha256:a"}), frozenset({"sha256:a", "sha256:b"}),
                                     frozenset({"a:1"}))), None)
    again = settled(packed(PinnedKeys(frozenset({"sha256:a"}), frozenset({"sha256:a", "sha256:b"}),
                                      frozenset({"a:1"}))), held)
    assert again is held
    moved = settled(packed(PinnedKeys(frozenset({"sha256:a"}), frozenset({"sha256:a", "sha256:b"}),
                                      frozenset({"a:1", "c:1"}))), held)
    assert moved.names == {"a:1", "c:1"} and moved.ids is held.ids and moved.id_bytes is held.id_bytes


def test_keys_survive_packing_whatever_they_hold() -> None:
    odd = PinnedKeys(frozenset(), frozenset({"sha256:a"}), frozenset({"a\nb", "c:1"}))
    assert settled(packed(odd), None) == odd
    assert packed(odd)[0] == ""

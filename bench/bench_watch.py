"""Issue 7 benchmark: sync --watch under a burst of 1,000 image creations, and idle.

Latency is measured by containerd's own clock: from each image's create event to the update
event that carries its pin label. Idle CPU is the watcher's user+system time over a quiet spell.

Run from the repository root, as root:  .venv/bin/python -m bench.bench_watch [--images 1000]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

from pinctl.proto import events_pb2, events_pb2_grpc
from tests.harness import images
from tests.harness.containerd import ContainerdDaemon

PIN = "io.cri-containerd.pinned"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def follow(address: str, count: int, created: dict[str, float], pinned: dict[str, float], done: threading.Event) -> None:
    channel = grpc.insecure_channel(f"unix://{address}")
    stream = events_pb2_grpc.EventsStub(channel).Subscribe(events_pb2.SubscribeRequest(filters=['topic~="^/images/"']))
    for envelope in stream:
        event = events_pb2.ImageEvent.FromString(envelope.event.value)
        if not event.name.startswith("example.test/bench-"):
            continue
        at = envelope.timestamp.seconds + envelope.timestamp.nanos / 1e9
        if envelope.topic == "/images/create":
            created.setdefault(event.name, at)
        elif event.labels.get(PIN) == "pinned":
            pinned.setdefault(event.name, at)
        if len(pinned) >= count:
            done.set()
            stream.cancel()
            return


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=10.0)
    opts = parser.parse_args()
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-") as tmp, tempfile.TemporaryDirectory(dir=shm) as data:
        daemon = ContainerdDaemon("containerd-1.7", Path(tmp) / "ctd", data_dir=Path(data)).start()
        config = Path(tmp) / "config.toml"
        config.write_text('pinned_images = ["example.test/bench-*"]\n')
        env = {**os.environ, "CONTAINERD_ADDRESS": daemon.address, "PINCTL_CONFIG": str(config)}
        watcher = subprocess.Popen([str(Path(sys.executable).parent / "pinctl"), "sync", "--watch", "-n", "k8s.io"],
                                   env=env, stderr=subprocess.DEVNULL)
        try:
            time.sleep(2)
            idle_start, idle_cpu = time.monotonic(), cpu_seconds(watcher.pid)
            time.sleep(opts.idle)
            idle = (cpu_seconds(watcher.pid) - idle_cpu) / (time.monotonic() - idle_start)
            created: dict[str, float] = {}
            pinned: dict[str, float] = {}
            done = threading.Event()
            threading.Thread(target=follow, args=(daemon.address, opts.images, created, pinned, done), daemon=True).start()
            time.sleep(0.5)
            archive = Path(tmp) / "burst.tar"
            images.build_archive(archive, images.numbered_recipes(opts.images))
            daemon.ctr("images", "import", "--no-unpack", "--all-platforms", str(archive))
            done.wait(120)
        finally:
            watcher.send_signal(signal.SIGTERM)
            watcher.wait(10)
            daemon.stop()
    latencies = sorted(pinned[name] - created[name] for name in pinned if name in created)
    p50 = statistics.median(latencies)
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    print("| benchmark | result | goal | met |\n| --- | --- | --- | --- |")
    print(f"| label latency, burst of {opts.images} creations, p50 | {p50 * 1000:.0f} ms | | |")
    print(f"| label latency, burst of {opts.images} creations, p99 | {p99 * 1000:.0f} ms | <= 1 s | {'yes' if p99 <= 1 else 'no'} |")
    print(f"| images labelled | {len(latencies)} of {opts.images} | all | {'yes' if len(latencies) == opts.images else 'no'} |")
    print(f"| watcher CPU while idle ({opts.idle:g} s) | {idle * 100:.2f} % of a core | ~0 | {'yes' if idle < 0.01 else 'no'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 53 benchmark: cri-proxy's image lists after idle beside direct, and its memory.

The kubelet's image calls come seconds apart. Each call here follows an idle pause (3 s, longer
than the 2 s after which the proxy used to read the pins on the call path), through the proxy
(the compiled relay, as `pinctl cri-proxy` runs it by default) and direct to containerd, in
turns whose order alternates, on long-lived connections as the kubelet keeps them. ListImages,
and StreamImages on an engine that serves it (containerd 2.4: `--engine containerd-2.4`).

With --churn (the default) one image's pin label is switched at the start of each pause: the
proxy then reads the pins in the background during the pause, as on a node whose images change.

In the same turns, calls go through `bench/passthrough` too: a program that relays the bytes
between the client and containerd's socket and does nothing else (no HTTP/2, no gRPC). What it
adds is what one more process on the path costs on this machine (its wake-ups after the pause and
its copies): the floor of any proxy, the relay's included.

Memory: the peak resident size (VmHWM) of the proxy's two processes (pinctl and the relay) at
the end, against the goal of 150 MiB at 10,000 images.

Run from the repository root, as root:
    .venv/bin/python -m bench.bench_criproxy_idle [--images 10000] [--engine containerd-2.4] [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import grpc

from bench.bench_criproxy import CHANNEL_OPTIONS, STREAM_IMAGES, start_proxy
from bench.common import ENGINE, containerd_with_images, progress
from pinctl.criproxy.relay import find_relay
from tests.harness import cri

GOAL = 1.2
MEMORY_GOAL_MIB = 150
PIN = "io.cri-containerd.pinned"
PASSTHROUGH_SRC = Path(__file__).resolve().parent / "passthrough" / "main.go"


def start_passthrough(tmp: Path, upstream: str) -> tuple[subprocess.Popen[bytes], str]:
    """bench/passthrough, built here (Go's standard library only), relaying to upstream."""
    binary, listen = tmp / "passthrough", str(tmp / "passthrough.sock")
    try:
        subprocess.run(["go", "build", "-o", str(binary), PASSTHROUGH_SRC.name], cwd=PASSTHROUGH_SRC.parent,
                       check=True, env={**os.environ, "GOFLAGS": "-buildvcs=false"})
    except (OSError, subprocess.CalledProcessError) as err:
        raise SystemExit(f"cannot build bench/passthrough with go ({err}): put Go on PATH") from None
    proc = subprocess.Popen([str(binary), listen, upstream])
    deadline = time.monotonic() + 30
    while not Path(listen).exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("bench/passthrough did not start")
        time.sleep(0.05)
    return proc, listen


def peak_mib(pid: int) -> float:
    """VmHWM of a process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(child) for child in text]
    return found


def wait_pinned(address: str, wanted: int, deadline_s: float = 120.0) -> None:
    deadline = time.monotonic() + deadline_s
    while sum(image.pinned for image in cri.list_images(address)) < wanted:
        if time.monotonic() > deadline:
            raise SystemExit("the proxy never reported the policy's pins")
        time.sleep(0.2)


def timed(call: Callable[..., Any], streamed: bool) -> float:
    start = time.perf_counter()
    answer = call(b"", timeout=60)
    if streamed:
        list(answer)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=15, help="calls after a pause, per address and method")
    parser.add_argument("--idle", type=float, default=3.0, help="seconds of pause before each call")
    parser.add_argument("--no-churn", dest="churn", action="store_false", help="change no label during the pauses")
    parser.add_argument("--engine", default=ENGINE, help=f"the containerd of tests/harness/engines.py (default {ENGINE})")
    opts = parser.parse_args()
    relay = find_relay("auto")
    if relay is None:
        raise SystemExit("pinctl-cri-relay is not built: scripts/build-relay")
    with containerd_with_images(opts.images, engine=opts.engine) as daemon, \
            tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        config = Path(tmp) / "config.toml"
        config.write_text('pinned_images = ["example.test/bench-1*"]\n')
        listen = str(Path(tmp) / "relay.sock")
        proxy = start_proxy(daemon.address, config, listen, relay)
        progress("go build bench/passthrough")
        passthrough, bytes_only = start_passthrough(Path(tmp), daemon.address)
        try:
            expected = sum(1 for image in cri.list_images(daemon.address)
                           if any(tag.startswith("example.test/bench-1") for tag in image.repo_tags))
            wait_pinned(listen, expected)
            churned = next(image.repo_tags[0] for image in cri.list_images(daemon.address)
                           if image.repo_tags and not image.repo_tags[0].startswith("example.test/bench-1"))
            methods = [(cri.LIST_IMAGES, False)] + ([(STREAM_IMAGES, True)] if daemon.config_version >= 4 else [])
            found = measure(opts, daemon, [daemon.address, listen, bytes_only], methods, churned)
            memory = peak_mib(proxy.pid), sum(peak_mib(child) for child in children(proxy.pid))
        finally:
            proxy.send_signal(signal.SIGTERM)
            proxy.wait(30)
            passthrough.kill()
            passthrough.wait(30)
    report(opts, found, memory)
    return 0


def measure(opts: argparse.Namespace, daemon: Any, addresses: list[str], methods: list[tuple[str, bool]],
            churned: str) -> dict[str, list[list[float]]]:
    """Seconds per call after a pause, by method: the calls to each address, in the order given."""
    channels = [grpc.insecure_channel(f"unix://{address}", options=CHANNEL_OPTIONS) for address in addresses]
    found: dict[str, list[list[float]]] = {}
    switched = False
    try:
        for method, streamed in methods:
            calls = [channel.unary_stream(method) if streamed else channel.unary_unary(method) for channel in channels]
            for call in calls:  # connected and warm, as the kubelet's connection is
                for _ in range(3):
                    timed(call, streamed)
            times: list[list[float]] = [[] for _ in addresses]
            for turn in range(opts.rounds):
                # Each address goes first, second and last in turn, and in either direction.
                shift = turn % len(addresses)
                order = [(index + shift) % len(addresses) for index in range(len(addresses))]
                if (turn // len(addresses)) % 2:
                    order.reverse()
                for index in order:
                    if opts.churn:  # a change the proxy reads during the pause
                        switched = not switched
                        daemon.label_image(churned, {PIN: "pinned"} if switched else {PIN: ""})
                    time.sleep(opts.idle)
                    times[index].append(timed(calls[index], streamed))
            found[method.rsplit("/", 1)[1]] = times
            progress(f"{method.rsplit('/', 1)[1]} done")
    finally:
        for channel in channels:
            channel.close()
    return found


def report(opts: argparse.Namespace, found: dict[str, list[list[float]]], memory: tuple[float, float]) -> None:
    ms = 1000.0
    print(f"{opts.engine}, {opts.images} images, {opts.rounds} calls each after {opts.idle:g} s idle"
          f"{', a label switched in each pause' if opts.churn else ''}")
    print("| call after idle | direct, median | proxy, median | ratio | worst proxy / median direct | goal | met "
          "| pass-through (floor), median | its ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for method, (direct, proxied, floor) in found.items():
        d, p, f = statistics.median(direct), statistics.median(proxied), statistics.median(floor)
        print(f"| {method} | {d * ms:.1f} ms | {p * ms:.1f} ms | {p / d:.3f}x | {max(proxied) / d:.2f}x "
              f"| {GOAL}x | {'yes' if p <= GOAL * d else 'no'} | {f * ms:.1f} ms | {f / d:.3f}x |")
    python, relay = memory
    print(f"| memory, peak | pinctl {python:.0f} MiB | relay {relay:.0f} MiB | together {python + relay:.0f} MiB "
          f"| - | {MEMORY_GOAL_MIB} MiB (pinctl) | {'yes' if python < MEMORY_GOAL_MIB else 'no'} |")


if __name__ == "__main__":
    sys.exit(main())

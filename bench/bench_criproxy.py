"""Issue 15 benchmark: what `pinctl cri-proxy` adds to CRI calls.

Added latency per unary call (p50 and p99 of 10,000 `Version` calls, direct against through
the proxy) and `ListImages` with 1,000 images through the proxy against direct, for both ways
of forwarding: the compiled relay (the default) and Python's gRPC (`--relay python`). Calls go
round-robin, each round starting with the next address, so that all see the same machine; for
ListImages, direct with one proxy at a time. The policy covers 111 of the images and nothing is
labelled, so every ListImages answer gets 111 pins added.

Run from the repository root, as root:  .venv/bin/python -m bench.bench_criproxy [--images 1000]
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

import grpc

from bench.common import PINCTL, containerd_with_images
from pinctl.criproxy.relay import find_relay
from tests.harness import cri

VERSION = "/runtime.v1.RuntimeService/Version"
WAYS = ("direct", "relay", "python")


def round_robin(addresses: list[str], method: str, rounds: int, warm_up: int = 100) -> list[list[float]]:
    """Seconds per call for each address, one call to each per round, after warm_up calls."""
    channels = [grpc.insecure_channel(f"unix://{address}") for address in addresses]
    try:
        calls = [channel.unary_unary(method) for channel in channels]
        for call in calls:
            for _ in range(warm_up):
                call(b"", timeout=30)
        found: list[list[float]] = [[] for _ in calls]
        for turn in range(rounds):
            # Each round starts with the next address: none always follows the same one.
            first = turn % len(calls)
            for index in [*range(first, len(calls)), *range(first)]:
                start = time.perf_counter()
                calls[index](b"", timeout=30)
                found[index].append(time.perf_counter() - start)
        return found
    finally:
        for channel in channels:
            channel.close()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def start_proxy(daemon_address: str, config: Path, listen: str, relay: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CONTAINERD_ADDRESS": daemon_address, "PINCTL_CONFIG": str(config)}
    proc = subprocess.Popen([PINCTL, "cri-proxy", "--listen", listen, "-r", f"unix://{daemon_address}",
                             "--relay", relay], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not os.path.exists(listen):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("the proxy did not start")
        time.sleep(0.05)
    return proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--lists", type=int, default=300)
    opts = parser.parse_args()
    relay = find_relay("auto")
    if relay is None:
        raise SystemExit("pinctl-cri-relay is not built: scripts/build-relay")
    with containerd_with_images(opts.images) as daemon, tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        config = Path(tmp) / "config.toml"
        config.write_text('pinned_images = ["example.test/bench-1*"]\n')
        listens = [str(Path(tmp) / f"{way}.sock") for way in WAYS[1:]]
        proxies = [start_proxy(daemon.address, config, listen, way_relay)
                   for listen, way_relay in zip(listens, (relay, "python"))]
        addresses = [daemon.address, *listens]
        try:
            pinned = [sum(image.pinned for image in cri.list_images(address)) for address in addresses]
            versions = round_robin(addresses, VERSION, opts.calls)
            # One proxy at a time beside direct: each reads the pins every 2 s while image calls
            # come, and the other's reads would weigh on it.
            lists: dict[str, list[float]] = {}
            for way, listen in zip(WAYS[1:], listens):
                lists["direct-" + way], lists[way] = round_robin([daemon.address, listen], cri.LIST_IMAGES, opts.lists)
            stale = {way: [] for way in WAYS[1:]}  # type: dict[str, list[float]]
            for _ in range(3):  # the pins older than 2 s: this call reads them first
                time.sleep(2.1)
                for way, address in zip(WAYS[1:], listens):
                    stale[way].append(round_robin([address], cri.LIST_IMAGES, 1, warm_up=0)[0][0])
        finally:
            for proxy in proxies:
                proxy.send_signal(signal.SIGTERM)
                proxy.wait(15)
    report(opts, dict(zip(WAYS, pinned)), dict(zip(WAYS, versions)), lists, stale)
    return 0


def report(opts: argparse.Namespace, pinned: dict[str, int], versions: dict[str, list[float]],
           lists: dict[str, list[float]], stale: dict[str, list[float]]) -> None:
    """A markdown table; ListImages' direct column is the one measured beside the relay / Python."""
    ms = 1000.0
    print("pinned in ListImages: " + ", ".join(f"{way} {count}" for way, count in pinned.items()))
    print("| benchmark | direct | relay | added | python | added | goal | relay meets it |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for share, name in ((0.5, "p50"), (0.99, "p99")):
        d, r, p = (percentile(versions[way], share) for way in WAYS)
        goal, met = ("p99 added < 1 ms", "yes" if r - d < 0.001 else "no") if name == "p99" else ("-", "-")
        print(f"| Version, {opts.calls} calls, {name} | {d * ms:.3f} ms | {r * ms:.3f} ms | +{(r - d) * ms:.3f} ms "
              f"| {p * ms:.3f} ms | +{(p - d) * ms:.3f} ms | {goal} | {met} |")
    for pick_name, pick in (("median", statistics.median), ("mean", statistics.mean)):
        dr, r, dp, p = (pick(lists[way]) for way in ("direct-relay", "relay", "direct-python", "python"))
        goal, met = ("< 1.2x", "yes" if r < 1.2 * dr else "no") if pick_name == "median" else ("-", "-")
        print(f"| ListImages, {opts.images} images, {opts.lists} calls, {pick_name} | {dr * ms:.2f} / {dp * ms:.2f} ms "
              f"| {r * ms:.2f} ms | {r / dr:.3f}x | {p * ms:.2f} ms | {p / dp:.3f}x | {goal} | {met} |")
    r, p = (statistics.median(stale[way]) for way in WAYS[1:])
    print(f"| ListImages after 2 s idle (reads the pins first), median of 3 | - | {r * ms:.0f} ms | - "
          f"| {p * ms:.0f} ms | - | - | - |")


if __name__ == "__main__":
    sys.exit(main())

"""Issue 15 benchmark: what `pinctl cri-proxy` adds to CRI calls.

Added latency per unary call (p50 and p99 of 10,000 `Version` calls, direct against through
the proxy) and `ListImages` with 1,000 images through the proxy against direct. The policy
covers 111 of the images and nothing is labelled, so the proxy rewrites every ListImages
answer (the worst case: parse, mark, serialise again).

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
from tests.harness import cri

VERSION = "/runtime.v1.RuntimeService/Version"


def latencies(address: str, method: str, count: int) -> list[float]:
    """Seconds per call, one after another over one connection (after a warm-up)."""
    with grpc.insecure_channel(f"unix://{address}") as channel:
        call = channel.unary_unary(method)
        for _ in range(min(count, 100) if count > 1 else 0):
            call(b"", timeout=30)
        found = []
        for _ in range(count):
            start = time.perf_counter()
            call(b"", timeout=30)
            found.append(time.perf_counter() - start)
    return found


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def start_proxy(daemon_address: str, config: Path, listen: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CONTAINERD_ADDRESS": daemon_address, "PINCTL_CONFIG": str(config)}
    proc = subprocess.Popen([PINCTL, "cri-proxy", "--listen", listen, "-r", f"unix://{daemon_address}"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    parser.add_argument("--lists", type=int, default=60)
    opts = parser.parse_args()
    with containerd_with_images(opts.images) as daemon, tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        config = Path(tmp) / "config.toml"
        config.write_text('pinned_images = ["example.test/bench-1*"]\n')
        listen = str(Path(tmp) / "proxy.sock")
        proxy = start_proxy(daemon.address, config, listen)
        try:
            pinned = sum(image.pinned for image in cri.list_images(listen))
            direct_pinned = sum(image.pinned for image in cri.list_images(daemon.address))
            direct_v = latencies(daemon.address, VERSION, opts.calls)
            proxied_v = latencies(listen, VERSION, opts.calls)
            direct_l = latencies(daemon.address, cri.LIST_IMAGES, opts.lists)
            proxied_l = latencies(listen, cri.LIST_IMAGES, opts.lists)
            stale = []
            for _ in range(3):  # the pins older than 2 s: this call reads them first
                time.sleep(2.1)
                stale.append(latencies(listen, cri.LIST_IMAGES, 1)[0])
        finally:
            proxy.send_signal(signal.SIGTERM)
            proxy.wait(15)
    ms = 1000.0
    print(f"pinned in ListImages: direct {direct_pinned}, through the proxy {pinned}")
    print("| benchmark | direct | through the proxy | added | goal | met |")
    print("| --- | --- | --- | --- | --- | --- |")
    for share, name in ((0.5, "p50"), (0.99, "p99")):
        d, p = percentile(direct_v, share), percentile(proxied_v, share)
        goal = "p99 added < 1 ms" if name == "p99" else "-"
        met = ("yes" if p - d < 0.001 else "no") if name == "p99" else "-"
        print(f"| Version, {opts.calls} calls, {name} | {d * ms:.3f} ms | {p * ms:.3f} ms | {(p - d) * ms:.3f} ms "
              f"| {goal} | {met} |")
    for label, pick in (("median", statistics.median), ("mean", statistics.mean)):
        d, p = pick(direct_l), pick(proxied_l)
        goal = "< 1.2x" if label == "median" else "-"
        met = ("yes" if p < 1.2 * d else "no") if label == "median" else "-"
        print(f"| ListImages, {opts.images} images, {opts.lists} calls, {label} | {d * ms:.1f} ms | {p * ms:.1f} ms "
              f"| {p / d:.3f}x | {goal} | {met} |")
    print(f"| ListImages after 2 s idle (reads the pins first), median of 3 | - | {statistics.median(stale) * ms:.0f} ms "
          "| - | - | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 15 benchmark: what `pinctl cri-proxy` adds to CRI calls.

Added latency per unary call (p50 and p99 of 10,000 `Version` calls, and of 10,000 `ImageStatus`
calls, each round the next of the images, direct against through the proxy) and `ListImages`
with 1,000 images through the proxy against direct, for both ways of forwarding: the compiled
relay (the default) and Python's gRPC (`--relay python`). Calls go round-robin, each round
starting with the next address, so that all see the same machine; for ListImages, direct with
one proxy at a time. The policy covers the images whose number starts
with 1 (111 of 1,000) and nothing is labelled, so every ListImages answer gets that many pins.

On an engine that serves it (containerd 2.4: `--engine containerd-2.4`), the streamed list too:
CRI v1 `StreamImages` (cri-api v0.37), each call read to its end, beside direct as ListImages.
The lists here come back to back; bench_criproxy_idle measures them after an idle pause, as the
kubelet makes them.

Run from the repository root, as root:
    .venv/bin/python -m bench.bench_criproxy [--images 1000] [--engine containerd-2.4 --lists 200]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import grpc

from bench.common import ENGINE, PINCTL, containerd_with_images, progress
from pinctl.criproxy.relay import find_relay
from pinctl.proto import cri_pb2
from tests.harness import cri

VERSION = "/runtime.v1.RuntimeService/Version"
IMAGE_STATUS = "/runtime.v1.ImageService/ImageStatus"
STREAM_IMAGES = "/runtime.v1.ImageService/StreamImages"
WAYS = ("direct", "relay", "python")
# 10,000 images make a ListImages answer of a few MiB: above gRPC's default 4 MiB, as the
# kubelet's own limit (16 MiB) allows.
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 * 2**20)]


def timed_rounds(calls: list[Callable[..., Any]], rounds: int,
                 requests: Sequence[bytes] = (b"",)) -> list[list[float]]:
    """Seconds per call for each of calls, one call to each per round; each round sends every
    address the same request, the next of requests."""
    found: list[list[float]] = [[] for _ in calls]
    for turn in range(rounds):
        request = requests[turn % len(requests)]
        # Each round starts with the next address: none always follows the same one.
        first = turn % len(calls)
        for index in [*range(first, len(calls)), *range(first)]:
            start = time.perf_counter()
            calls[index](request, timeout=30)
            found[index].append(time.perf_counter() - start)
    return found


def round_robin(addresses: list[str], method: str, rounds: int, warm_up: int = 100,
                streamed: bool = False, requests: Sequence[bytes] = (b"",)) -> list[list[float]]:
    """Seconds per call for each address, one call to each per round, after warm_up calls. A
    streamed call (unary request, streamed answer) counts until its last message."""
    channels = [grpc.insecure_channel(f"unix://{address}", options=CHANNEL_OPTIONS) for address in addresses]
    try:
        if streamed:
            calls = [lambda request, stub=channel.unary_stream(method), **kw: list(stub(request, **kw))
                     for channel in channels]
        else:
            calls = [channel.unary_unary(method) for channel in channels]
        for call in calls:
            for turn in range(warm_up):
                call(requests[turn % len(requests)], timeout=30)
        return timed_rounds(calls, rounds, requests)
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


def streamed_pins(address: str) -> tuple[int, int, int]:
    """Images, pinned images and messages of one StreamImages call."""
    with grpc.insecure_channel(f"unix://{address}", options=CHANNEL_OPTIONS) as channel:
        messages = list(channel.unary_stream(STREAM_IMAGES)(b"", timeout=30))
    listed = [image for message in messages for image in cri_pb2.ListImagesResponse.FromString(message).images]
    return len(listed), sum(image.pinned for image in listed), len(messages)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--lists", type=int, default=300, help="ListImages (and StreamImages) calls per address")
    parser.add_argument("--engine", default=ENGINE, help=f"the containerd of tests/harness/engines.py (default {ENGINE})")
    opts = parser.parse_args()
    relay = find_relay("auto")
    if relay is None:
        raise SystemExit("pinctl-cri-relay is not built: scripts/build-relay")
    warm_lists = min(100, max(10, 100_000 // opts.images))  # 100 at 1,000 images, 10 at 10,000
    with containerd_with_images(opts.images, engine=opts.engine) as daemon, \
            tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        config = Path(tmp) / "config.toml"
        config.write_text('pinned_images = ["example.test/bench-1*"]\n')
        listens = [str(Path(tmp) / f"{way}.sock") for way in WAYS[1:]]
        proxies = [start_proxy(daemon.address, config, listen, way_relay)
                   for listen, way_relay in zip(listens, (relay, "python"))]
        addresses = [daemon.address, *listens]
        try:
            pinned = [sum(image.pinned for image in cri.list_images(address)) for address in addresses]
            streams = {way: streamed_pins(address) for way, address in zip(WAYS, addresses)} \
                if daemon.config_version >= 4 else {}
            progress(f"pinned in ListImages: {pinned}; StreamImages (images, pinned, messages): {streams}")
            versions = round_robin(addresses, VERSION, opts.calls)
            progress("Version done")
            statuses = round_robin(addresses, IMAGE_STATUS, opts.calls, requests=image_status_requests(opts.images))
            progress("ImageStatus done")
            # One proxy at a time beside direct: each reads the pins every 2 s while image calls
            # come, and the other's reads would weigh on it.
            lists: dict[str, list[float]] = {}
            for method, prefix in ((cri.LIST_IMAGES, ""), (STREAM_IMAGES, "stream-")):
                if prefix and not streams:
                    continue
                for way, listen in zip(WAYS[1:], listens):
                    lists[prefix + "direct-" + way], lists[prefix + way] = round_robin(
                        [daemon.address, listen], method, opts.lists, warm_up=warm_lists, streamed=bool(prefix))
                    progress(f"{method.rsplit('/', 1)[1]} beside {way} done")
        finally:
            for proxy in proxies:
                proxy.send_signal(signal.SIGTERM)
                proxy.wait(15)
    report(opts, dict(zip(WAYS, pinned)), {"Version": dict(zip(WAYS, versions)),
                                           "ImageStatus": dict(zip(WAYS, statuses))}, lists)
    if streams:
        print("StreamImages (images, pinned, messages): "
              + ", ".join(f"{way} {found}" for way, found in streams.items()))
    return 0


def image_status_requests(images: int) -> list[bytes]:
    """An ImageStatus request for each image, in a fixed shuffled order: one in nine is pinned by
    the policy, so its answer is rewritten."""
    refs = [f"example.test/bench-{i}:1.0" for i in range(images)]
    random.Random(53).shuffle(refs)
    return [cri_pb2.ImageStatusRequest(image=cri_pb2.ImageSpec(image=ref)).SerializeToString() for ref in refs]


def report(opts: argparse.Namespace, pinned: dict[str, int], unary: dict[str, dict[str, list[float]]],
           lists: dict[str, list[float]]) -> None:
    """A markdown table; ListImages' direct column is the one measured beside the relay / Python."""
    ms = 1000.0
    print(f"{opts.engine}; pinned in ListImages: " + ", ".join(f"{way} {count}" for way, count in pinned.items()))
    print("| benchmark | direct | relay | added | python | added | goal | relay meets it |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for method, seconds in unary.items():
        for share, name in ((0.5, "p50"), (0.99, "p99")):
            d, r, p = (percentile(seconds[way], share) for way in WAYS)
            goal, met = ("p99 added < 1 ms", "yes" if r - d < 0.001 else "no") if name == "p99" else ("-", "-")
            print(f"| {method}, {opts.calls} calls, {name} | {d * ms:.3f} ms | {r * ms:.3f} ms "
                  f"| {(r - d) * ms:+.3f} ms | {p * ms:.3f} ms | {(p - d) * ms:+.3f} ms | {goal} | {met} |")
    picks = (("median", statistics.median), ("mean", statistics.mean), ("p99", lambda v: percentile(v, 0.99)))
    for prefix, method in (("", "ListImages"), ("stream-", "StreamImages")):
        if prefix + "relay" not in lists:
            continue
        for pick_name, pick in picks:
            dr, r, dp, p = (pick(lists[prefix + way]) for way in ("direct-relay", "relay", "direct-python", "python"))
            judged = pick_name == "median" and not prefix
            goal, met = ("< 1.2x", "yes" if r < 1.2 * dr else "no") if judged else ("-", "-")
            print(f"| {method}, {opts.images} images, {opts.lists} calls, {pick_name} | {dr * ms:.2f} / {dp * ms:.2f} ms "
                  f"| {r * ms:.2f} ms | {r / dr:.3f}x ({(r - dr) * ms:+.2f} ms) | {p * ms:.2f} ms "
                  f"| {p / dp:.3f}x ({(p - dp) * ms:+.2f} ms) | {goal} | {met} |")


if __name__ == "__main__":
    sys.exit(main())

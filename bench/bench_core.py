"""Issue 2 benchmarks: ls and pin of 1,000 images beside ctr, and --help beside a bare python.

Run from the repository root, as root:
    .venv/bin/python -m bench.bench_core [--images 1000] [--engine containerd-2.4]
containerd 1.7 unless --engine names another containerd of tests/harness/engines.py.

pin is judged against a loop of one `ctr images label` per reference (goal 0.05x). Beside it, in
the same run on the same daemon, two figures show how much of pinctl's time is containerd's own:
the same writes (one Get and one field-masked Update per reference, as pinctl's guarded writes
make) sent by a minimal gRPC client with no planning, checks or output, and the CPU seconds
containerd spent during pinctl's pin (bolt commits each Update alone, and its CRI plugin handles
each update's event). Each pin starts on an idle daemon: containerd goes on handling the events of
the writes before it for a second or more after the last answer. pinctl runs with --timeout 30:
on a machine this busy containerd has kept an answer waiting more than the default 2 s, and the
run would end there (ctr waits without a deadline); the time of a run with no such wait is the same.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import deque
from typing import Callable

from bench.common import ENGINE, PINCTL, Row, containerd_with_images, median_time, overhead_row, ratio_row, report, run_once
from tests.harness.containerd import ContainerdDaemon

PIN_GOAL = 1 / 20
PIN = "io.cri-containerd.pinned"
# The minimal client's calls in flight: deeper than pinctl's, so that it waits on containerd alone.
FLOOR_WINDOW = 256


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--engine", default=ENGINE, help=f"the containerd of tests/harness/engines.py (default {ENGINE})")
    opts = parser.parse_args()
    with containerd_with_images(opts.images, engine=opts.engine) as daemon:
        rows = [bench_ls(daemon, opts.images, opts.repeat), *bench_pin(daemon, opts.images)]
    help_ours = median_time([PINCTL, "--help"], opts.repeat * 4)
    help_peer = median_time([sys.executable, "-c", "pass"], opts.repeat * 4)
    rows.append(overhead_row("pinctl --help", help_ours, "python -c pass", help_peer, 0.150))
    print(report(rows))
    return 0


def ctr_argv(daemon: ContainerdDaemon) -> list[str]:
    return [str(daemon.bin_dir / "ctr"), "-a", daemon.address, "-n", "k8s.io"]


def bench_ls(daemon: ContainerdDaemon, count: int, repeat: int) -> Row:
    env = {"CONTAINERD_ADDRESS": daemon.address}
    ours = median_time([PINCTL, "ls", "-n", "k8s.io"], repeat, env)
    peer = median_time([*ctr_argv(daemon), "images", "ls"], repeat)
    return ratio_row(f"ls, {count} images", ours, "ctr images ls", peer, 0.5)


def bench_pin(daemon: ContainerdDaemon, count: int) -> list[Row]:
    """pin of every reference beside the ctr label loop; then the floor: the same writes from a
    minimal client, and containerd's CPU seconds during pinctl's pin."""
    env = {"CONTAINERD_ADDRESS": daemon.address}
    refs = daemon.ctr("images", "ls", "-q").stdout.split()
    ctr = " ".join(ctr_argv(daemon))
    loop = f'{ctr} images ls -q | while read -r ref; do {ctr} images label "$ref" {PIN}=pinned >/dev/null; done'
    peer = run_once([loop], shell=True)
    run_once([PINCTL, "unpin", "-n", "k8s.io", "-q", "--timeout", "30", *refs], env)
    cpu = daemon_cpu(daemon)
    wait_idle(cpu)
    before = cpu()
    ours = run_once([PINCTL, "pin", "-n", "k8s.io", "-q", "--timeout", "30", *refs], env)
    daemon_seconds = cpu() - before
    minimal_writes(daemon.address, refs, None)  # back to unpinned, untimed
    wait_idle(cpu)
    floor = minimal_writes(daemon.address, refs, "pinned")
    peer_name = "ctr images label loop"
    name = f"pin {len(refs)} refs of {count} images"
    return [ratio_row(name, ours, peer_name, peer, PIN_GOAL),
            ratio_row(f"{name}: the same Gets and Updates from a minimal client (containerd's floor)", floor,
                      peer_name, peer, PIN_GOAL),
            ratio_row(f"{name}: containerd's CPU during pinctl's pin", daemon_seconds, peer_name, peer, PIN_GOAL)]


def daemon_cpu(daemon: ContainerdDaemon) -> Callable[[], float]:
    """The daemon's CPU seconds so far (user and system), read from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")

    def seconds() -> float:
        with open(f"/proc/{daemon.pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / ticks

    return seconds


def wait_idle(cpu: Callable[[], float], quiet: float = 0.02, deadline: float = 120.0) -> None:
    """Until the daemon used under `quiet` CPU seconds in half a second (or the deadline passed)."""
    last, ends = cpu(), time.monotonic() + deadline
    while time.monotonic() < ends:
        time.sleep(0.5)
        now = cpu()
        if now - last < quiet:
            return
        last = now


def minimal_writes(address: str, refs: list[str], value: str | None) -> float:
    """Seconds for a bare client to read each record and write the pin label (value) on it, or
    remove it (None), with FLOOR_WINDOW calls in flight: what pinctl's guarded writes ask of
    containerd, without pinctl's planning, checks, undo or output."""
    import grpc
    from google.protobuf import field_mask_pb2

    from pinctl.proto import images_pb2, images_pb2_grpc

    channel = grpc.insecure_channel(f"unix://{address}")
    stub = images_pb2_grpc.ImagesStub(channel)
    metadata = (("containerd-namespace", "k8s.io"),)
    mask = field_mask_pb2.FieldMask(paths=[f"labels.{PIN}"])
    labels = {PIN: value} if value else {}
    started = time.perf_counter()
    reads: deque = deque()
    writes: deque = deque()

    def write(got: object) -> None:
        image = got.result().image  # type: ignore[attr-defined]
        record = images_pb2.Image(name=image.name, labels=labels, target=image.target)
        writes.append(stub.Update.future(images_pb2.UpdateImageRequest(image=record, update_mask=mask),
                                         metadata=metadata, timeout=60))
        if len(writes) >= FLOOR_WINDOW // 2:
            writes.popleft().result()

    for ref in refs:
        reads.append(stub.Get.future(images_pb2.GetImageRequest(name=ref), metadata=metadata, timeout=60))
        if len(reads) >= FLOOR_WINDOW // 2:
            write(reads.popleft())
    while reads:
        write(reads.popleft())
    while writes:
        writes.popleft().result()
    elapsed = time.perf_counter() - started
    channel.close()
    return elapsed


if __name__ == "__main__":
    sys.exit(main())

"""Issue 23 benchmark: resident memory of sync --watch and cri-proxy at 10,000 images.

containerd 1.7 (data on tmpfs) with N images in k8s.io, 2N references with the CRI's `sha256:`
ones. Both services run as deployed, with --metrics-address (scraped every second) and the
watcher's periodic check on. Each one's VmRSS and VmHWM (/proc/PID/status) are read after its
first full read (the watcher: its first full sync and first check round, each reading taken as
a check round ends; the proxy: its first pin read, made by one ListImages through it), and again after E image events (record creates,
label updates and deletes through containerd's Images API, a window of calls at a time) and R
CRI reads through the proxy (ImageStatus, every tenth a ListImages) spread over the events. The
periodic check runs every 10 s here (--check-interval), so that several of its rounds fall in.

The peer is containerd itself (its VmRSS at the same moments) and one `ctr images ls` on the
same daemon (wall time and peak RSS). Goals (issue 23): under 150 MiB at the first read, and
after / before within 1.10x.

Run from the repository root, as root:
    .venv/bin/python -m bench.bench_services --images 10000 --events 10000 --reads 1000
It measures the pinctl of this checkout (src/ first on PYTHONPATH), whatever the venv installed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import grpc

from bench.bench_metrics import Scraper, free_port
from bench.common import REPO, containerd_with_images, run_measured
from pinctl.proto import images_pb2
from tests.harness import cri, protowire
from tests.harness.containerd import ContainerdDaemon

POLICY = 'pinned_images = ["example.test/bench-1*"]\n'
IMAGES = "/containerd.services.images.v1.Images/"
IMAGE_STATUS = "/runtime.v1.ImageService/ImageStatus"
TICK = "bench.example/tick"
CRI_MANAGED = "io.cri-containerd.image"
WINDOW = 64
ROUND = 100  # records created, updated and deleted per round of events
GOAL_MIB, GOAL_RATIO = 150.0, 1.10
MiB = 1024 * 1024


# -- the processes ------------------------------------------------------------------------------

def pinctl_argv(*args: str) -> list[str]:
    """This checkout's pinctl: `python -m pinctl` with src/ first on the path (see env_for)."""
    return [sys.executable, "-m", "pinctl", *args]


def env_for(daemon_address: str, config: Path) -> dict[str, str]:
    path = os.pathsep.join([str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    # The deletion journal of the watcher (its deletes are recorded) beside the config, not under /var/lib.
    return {**os.environ, "PYTHONPATH": path, "CONTAINERD_ADDRESS": daemon_address, "PINCTL_CONFIG": str(config),
            "PINCTL_HISTORY_DIR": str(config.parent / "history")}


@dataclass
class Service:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def memory(self) -> tuple[float, float]:
        """(VmRSS, VmHWM) in MiB."""
        return status_mib(self.proc.pid)

    def metric(self, name: str) -> float:
        """The sum of a metric's series on /metrics."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name) and line[len(name)] in " {")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def status_mib(pid: int) -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return tuple(int(fields[key].split()[0]) / 1024 for key in ("VmRSS", "VmHWM"))  # type: ignore[return-value]


def children_of(pid: int) -> list[int]:
    tasks = Path(f"/proc/{pid}/task")
    return [int(child) for task in tasks.iterdir() for child in (task / "children").read_text().split()]


def start_watcher(daemon: ContainerdDaemon, config: Path, tmp: Path, check_interval: float) -> Service:
    port, log = free_port(), tmp / "watch.log"
    proc = subprocess.Popen(pinctl_argv("sync", "--watch", "-n", "k8s.io", "--log-format", "json",
                                        "--metrics-address", f"127.0.0.1:{port}", "-r", f"unix://{daemon.address}",
                                        "--check-interval", f"{check_interval:g}"),
                            env=env_for(daemon.address, config), stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    service = Service("sync --watch", proc, port, log)
    # The first full sync, then the periodic check's first round (it lists and reads the CRI too).
    wait_until(lambda: any(json.loads(line).get("msg") == "full sync" for line in log.read_text().splitlines()),
               service, 300)
    wait_until(lambda: service.metric("pinctl_last_check_timestamp_seconds") > 0, service, 300)
    return service


def start_proxy(daemon: ContainerdDaemon, config: Path, tmp: Path) -> tuple[Service, str]:
    port, log, listen = free_port(), tmp / "proxy.log", str(tmp / "proxy.sock")
    proc = subprocess.Popen(pinctl_argv("cri-proxy", "--listen", listen, "-r", f"unix://{daemon.address}",
                                        "--log-format", "json", "--metrics-address", f"127.0.0.1:{port}"),
                            env=env_for(daemon.address, config), stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    service = Service("cri-proxy", proc, port, log)
    wait_until(lambda: os.path.exists(listen), service, 30)
    cri.list_images(listen)  # the first image call reads the pins first
    wait_until(lambda: service.metric("pinctl_cri_proxy_pin_reads_total") >= 1, service, 60)
    return service, listen


def wait_until(done: Callable[[], bool], service: Service, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, ValueError):
            if done():
                return
        if service.proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{service.name} did not get there: {service.log.read_text()[-2000:]}")
        time.sleep(0.2)


# -- events and reads ---------------------------------------------------------------------------

class Events:
    """Image events through containerd's Images API: each round creates ROUND new records (half
    of them names the policy covers, which the watcher then labels), updates a label of ROUND
    existing ones and deletes the records it created, so the namespace keeps its size while new
    names keep coming."""

    def __init__(self, address: str, names: Sequence[str]) -> None:
        self.channel = grpc.insecure_channel(f"unix://{address}")
        self.metadata = (("containerd-namespace", "k8s.io"),)
        self.names = list(names)
        self.template = images_pb2.GetImageResponse.FromString(
            self._call("Get", images_pb2.GetImageRequest(name=self.names[0]).SerializeToString())).image
        self.made = 0
        self.rounds = 0
        self.run = f"{time.time_ns() % 10 ** 9:x}"  # fresh names in every run, against the same daemon too

    def _call(self, method: str, request: bytes) -> bytes:
        reply: bytes = self.channel.unary_unary(IMAGES + method)(request, metadata=self.metadata, timeout=30)
        return reply

    def _many(self, method: str, requests: Sequence[bytes]) -> None:
        call = self.channel.unary_unary(IMAGES + method)
        for start in range(0, len(requests), WINDOW):
            futures = [call.future(r, metadata=self.metadata, timeout=30) for r in requests[start:start + WINDOW]]
            for future in futures:
                future.result()
        self.made += len(requests)

    def round(self, budget: int) -> None:
        """At most budget events: creates, updates, then deletes, a third each."""
        count = max(1, min(ROUND, budget // 3))
        fresh = [f"example.test/{'bench-1churn' if i % 2 else 'churn'}-{self.run}-{self.rounds}-{i}:1" for i in range(count)]
        creates = []
        for name in fresh:
            # With the CRI plugin's own label: without it the plugin adds it, and an update of its
            # that comes after the delete makes the record again.
            image = images_pb2.Image(name=name, target=self.template.target, labels={CRI_MANAGED: "managed"})
            creates.append(images_pb2.CreateImageRequest(image=image).SerializeToString())
        self._many("Create", creates)
        updates = []
        for name in random.sample(self.names, count):
            # The target goes too although the mask leaves it out: containerd 1.7 dereferences it.
            image = images_pb2.Image(name=name, labels={TICK: str(self.rounds)}, target=self.template.target)
            mask = images_pb2.UpdateImageRequest(image=image)
            mask.update_mask.paths.append(f"labels.{TICK}")
            updates.append(mask.SerializeToString())
        self._many("Update", updates)
        rest = budget - 2 * count
        self._many("Delete", [protowire.encode([(1, name)]) for name in fresh[:rest]])
        self.rounds += 1

    def close(self) -> None:
        self.channel.close()


def cri_read(channel: grpc.Channel, names: Sequence[str], index: int) -> None:
    """ImageStatus of one reference; every tenth read a ListImages."""
    if index % 10 == 9:
        channel.unary_unary(cri.LIST_IMAGES)(b"", timeout=60)
        return
    request = protowire.encode([(1, [(1, random.choice(names))])])
    channel.unary_unary(IMAGE_STATUS)(request, timeout=60)


def churn(daemon: ContainerdDaemon, listen: str, opts: argparse.Namespace, names: Sequence[str]) -> int:
    """The events, with the reads spread over them; the events the watcher saw meanwhile."""
    events = Events(daemon.address, names)
    channel = grpc.insecure_channel(f"unix://{listen}")
    reads = 0
    try:
        while events.made < opts.events:
            events.round(opts.events - events.made)
            due = opts.reads * events.made // opts.events
            for index in range(reads, due):
                cri_read(channel, names, index)
            reads = due
    finally:
        channel.close()
        events.close()
    return reads


def settle(watcher: Service, quiet: float = 3.0, timeout: float = 300) -> float:
    """Wait until the watcher's event count stops moving; that count."""
    deadline = time.monotonic() + timeout
    last, since = -1.0, time.monotonic()
    while time.monotonic() < deadline:
        seen = watcher.metric("pinctl_image_events_total")
        if seen != last:
            last, since = seen, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return seen
        time.sleep(0.5)
    return last


def after_check(watcher: Service, timeout: float = 120) -> None:
    """Wait for the end of the next round of the periodic check: both readings of the watcher
    are taken at the same point of its cycle, not one of them in the middle of a round."""
    last = watcher.metric("pinctl_last_check_timestamp_seconds")
    wait_until(lambda: watcher.metric("pinctl_last_check_timestamp_seconds") != last, watcher, timeout)


# -- the peer -----------------------------------------------------------------------------------

def ctr_ls(daemon: ContainerdDaemon) -> tuple[float, float]:
    """Seconds and peak RSS (MiB) of one `ctr images ls` on the same daemon."""
    argv = [str(daemon.bin_dir / "ctr"), "-a", daemon.address, "-n", "k8s.io", "images", "ls"]
    took, peak = run_measured(argv)
    return took, peak / 2**20


# -- the run ------------------------------------------------------------------------------------

@dataclass
class Reading:
    rss: float
    hwm: float
    peer_rss: float


def reading(service: Service, daemon: ContainerdDaemon) -> Reading:
    if service.name == "sync --watch":
        after_check(service)
    rss, hwm = service.memory()
    return Reading(rss, hwm, status_mib(daemon.pid or 0)[0])


@contextlib.contextmanager
def node(opts: argparse.Namespace) -> Iterator[ContainerdDaemon]:
    if opts.address:
        daemon = ContainerdDaemon("containerd-1.7", Path(tempfile.mkdtemp(prefix="pinctl-bench-")))
        daemon.address = opts.address
        daemon.pid = containerd_pid(Path(opts.address).parent.parent)
        yield daemon
        return
    with containerd_with_images(opts.images) as daemon:
        yield daemon


def containerd_pid(base_dir: Path) -> int:
    """The containerd whose config lies in base_dir (the harness's layout)."""
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if entry.name.isdigit() and argv[0].endswith(b"/containerd") and str(base_dir).encode() in b" ".join(argv):
                return int(entry.name)
    raise SystemExit(f"no containerd runs from {base_dir}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10000)
    parser.add_argument("--events", type=int, default=10000)
    parser.add_argument("--reads", type=int, default=1000)
    parser.add_argument("--check-interval", type=float, default=10.0,
                        help="the watcher's periodic check (60 s by default in pinctl): several rounds during the events")
    parser.add_argument("--address", help="a running containerd that already holds the images (for profiling)")
    opts = parser.parse_args()
    random.seed(23)
    with node(opts) as daemon, tempfile.TemporaryDirectory(prefix="pinctl-bench-") as tmpdir:
        tmp = Path(tmpdir)
        config = tmp / "config.toml"
        config.write_text(POLICY)
        names = [image.ref for image in daemon.images() if image.ref.startswith("example.test/bench-")]
        ls_time, ls_peak = ctr_ls(daemon)
        services: list[Service] = []
        try:
            watcher = start_watcher(daemon, config, tmp, opts.check_interval)
            services.append(watcher)
            proxy, listen = start_proxy(daemon, config, tmp)
            services.append(proxy)
            first = {s.name: reading(s, daemon) for s in services}
            relay_first = relay_rss(proxy)
            seen_before = watcher.metric("pinctl_image_events_total")
            pin_reads_before = proxy.metric("pinctl_cri_proxy_pin_reads_total")
            start = time.monotonic()
            with Scraper(watcher.port), Scraper(proxy.port):
                reads = churn(daemon, listen, opts, names)
                seen = settle(watcher) - seen_before
            took = time.monotonic() - start
            time.sleep(2.1)
            cri.list_images(listen)  # one more pin read, of the namespace as the events left it
            pin_reads = proxy.metric("pinctl_cri_proxy_pin_reads_total") - pin_reads_before
            after = {s.name: reading(s, daemon) for s in services}
            relay_after = relay_rss(proxy)
        finally:
            for service in services:
                service.stop()
    print(f"{len(names)} images ({2 * len(names)} references) in k8s.io; check every {opts.check_interval:g} s; "
          f"{opts.events} events made in {took:.0f} s, "
          f"{seen:.0f} seen by the watcher (its own label writes included); {reads} CRI reads through the proxy, "
          f"{pin_reads:.0f} pin reads by it (one at most every 2 s while calls come); "
          f"the relay's RSS {relay_first:.0f} MiB, then {relay_after:.0f} MiB")
    print(report(opts, first, after, (ls_time, ls_peak)))
    return 0


def relay_rss(proxy: Service) -> float:
    return sum(status_mib(pid)[0] for pid in children_of(proxy.proc.pid))


def report(opts: argparse.Namespace, first: dict[str, Reading], after: dict[str, Reading],
           ls: tuple[float, float]) -> str:
    """A markdown table in the shape of common.report(), in MiB: pinctl, the peer, the ratio."""
    lines = ["| benchmark | pinctl | peer | peer figure | ratio | goal | met |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    n = f"{opts.images} images"
    for name, one in first.items():
        lines.append(_row(f"{name} VmHWM (peak) after its first full read, {n}", one.hwm,
                          "containerd VmRSS", one.peer_rss, f"< {GOAL_MIB:g} MiB", one.hwm < GOAL_MIB))
        lines.append(_row(f"{name} VmRSS after its first full read, {n}", one.rss,
                          "containerd VmRSS", one.peer_rss, "", None))
    for name, one in first.items():
        two = after[name]
        what = f"after {opts.events} events and {opts.reads} reads"
        lines.append(_row(f"{name} VmRSS {what}", two.rss, "its VmRSS after the first read", one.rss,
                          f"<= {GOAL_RATIO:g}x", two.rss <= GOAL_RATIO * one.rss))
        lines.append(_row(f"{name} VmHWM {what}", two.hwm, "its VmHWM after the first read", one.hwm,
                          f"<= {GOAL_RATIO:g}x and < {GOAL_MIB:g} MiB",
                          two.hwm <= GOAL_RATIO * one.hwm and two.hwm < GOAL_MIB))
        lines.append(_row(f"containerd VmRSS {what} (beside {name})", two.peer_rss, "the same before",
                          one.peer_rss, "", None))
    lines.append(f"| ctr images ls, {n} | - | ctr images ls | {ls[1]:.0f} MiB peak, {ls[0] * 1000:.0f} ms | - | - | - |")
    return "\n".join(lines)


def _row(name: str, ours: float, peer: str, theirs: float, goal: str, met: Optional[bool]) -> str:
    ratio = ours / theirs if theirs else float("inf")
    verdict = "-" if met is None else ("yes" if met else "no")
    return f"| {name} | {ours:.0f} MiB | {peer} | {theirs:.0f} MiB | {ratio:.3f} | {goal or '-'} | {verdict} |"


if __name__ == "__main__":
    sys.exit(main())

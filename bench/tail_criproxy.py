"""Issues 44 and 53: where the p99 of a unary call through `pinctl cri-proxy` comes from, and
what a node can do about it without real-time scheduling.

Run from the repository root, as root:
    .venv/bin/python -m bench.tail_criproxy [--method imagestatus] [--images 1000] [--load 2]
        [--runs 3] [--calls 10000] [--kinds plain,relay-slice,relay-group] [--proxies relay]
        [--other-relay PATH] [--engine containerd-1.7] [--save runs.json]

One containerd with `--images` images, and proxies in front of it, chosen by `--proxies`: `relay`
(as pinctl starts it: its threads ask for a 0.1 ms slice, cri-relay/slice.go), `kernel-slice` (the
relay with the kernel's default slice, PINCTL_RELAY_SLICE=0), `sysmon-sleep` (the relay with Go's
sysmon let to take its long sleep, PINCTL_RELAY_SYSMON=sleep: cri-relay/sysmon.go), `gogc-off` (the relay with Go's collector off), `gomaxprocs-2`, `python`
(`--relay python`), and `other` (the relay binary `--other-relay` names: another tree's build,
beside this one). The relays log each Go collection (GODEBUG=gctrace=1). No call waits for a
read of the pins (cri-proxy keeps them current in the background). `--load N` starts N busy loops, each in a session of its own (as
another service or pod is), for the whole benchmark.

The calls (`--method`: `imagestatus`, each round the next of the images in a fixed shuffled
order, about one in nine pinned by the policy so its answer is rewritten; `version`; or
`listimages`, to see whether a setting slows a long answer) go
round-robin to the daemon and each proxy, as bench_criproxy does, in runs of each kind taken in
turn, so that each kind sees the same machine:

- plain: as bench_criproxy;
- client-gc-off: this process's collector off during the calls (it times every call);
- fifo: every thread of containerd, the proxies, their relays and this process SCHED_FIFO
  (chrt -a -f 10) during the calls, so that no other program's thread runs before them (real-time:
  the proxy's own cost, not something to run a node with);
- relay-nice: every thread of the relays at nice -20 (setpriority per thread: what `Nice=-20` in
  the unit gives). Linux's niceness weighs a thread against the others of its task group only
  (its cgroup, or its session's autogroup when `kernel.sched_autogroup_enabled` is 1);
- relay-group: the relays' task groups weigh as nice -20 (their autogroup, `/proc/PID/autogroup`:
  on a node, a larger `CPUWeight=` for the unit's cgroup does the same);
- relay-slice: every thread of the relays asks the kernel's EEVDF scheduler (Linux 6.12 and later)
  for a 0.1 ms slice instead of the default (sched_setattr's sched_runtime), so that a woken relay
  thread may preempt a running one at once; nothing else changes;
- relay-slice-group: relay-slice and relay-group together.

For each run: p50 and p99 per address and p99 added, the Go collections in each relay; per
process, the time its threads waited runnable on a CPU (schedstat's run_delay), how often they
were put on a CPU (schedstat's timeslices: about the wake-ups) and preempted
(nonvoluntary_ctxt_switches), per 1,000 calls; the calls over p50 + 1 ms and how many of them
had a slow direct call in the same or a neighbouring round (a stall of the whole machine, not
of the proxy), and where in the run they fell (first 10 %).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import grpc

from bench.bench_criproxy import VERSION, image_status_requests, percentile, timed_rounds
from bench.common import ENGINE, PINCTL, containerd_with_images, progress

IMAGE_STATUS = "/runtime.v1.ImageService/ImageStatus"
METHODS = {"version": VERSION, "imagestatus": IMAGE_STATUS, "listimages": "/runtime.v1.ImageService/ListImages"}
# name -> (--relay: the built relay, python or the other binary; extra environment)
PROXIES = {
    "relay": ("relay", {}),
    "kernel-slice": ("relay", {"PINCTL_RELAY_SLICE": "0"}),
    "gogc-off": ("relay", {"GOGC": "off"}),
    "gogc-400": ("relay", {"GOGC": "400"}),
    "sysmon-sleep": ("relay", {"PINCTL_RELAY_SYSMON": "sleep"}),
    "gomaxprocs-2": ("relay", {"GOMAXPROCS": "2"}),
    "python": ("python", {}),
    "other": ("other", {}),
}
KINDS = ("plain", "client-gc-off", "fifo", "relay-nice", "relay-group", "relay-slice", "relay-slice-group")
SLOW_OVER_P50 = 0.001
MS = 1000.0
SLICE_NS = 100_000
GROUP_NICE = -20
THREAD_NICE = -20
# 10,000 images make a ListImages answer of a few MiB; ImageStatus' is small.
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 * 2**20)]


@dataclass
class Proxy:
    name: str
    proc: subprocess.Popen[bytes]
    listen: str
    log: Path

    def pids(self) -> list[int]:
        """pinctl and its relay (a child of its own session) if it has one."""
        return [self.proc.pid, *self.relay_pids()]

    def relay_pids(self) -> list[int]:
        return [int(pid) for task in threads_of(self.proc.pid) for pid in (task / "children").read_text().split()]

    def go_collections(self) -> int:
        return len(re.findall(r"^gc \d+ @", self.log.read_text(errors="replace"), re.M))


def start_proxy(name: str, upstream: str, tmp: Path, relay: str, env_extra: dict[str, str],
                refresh: Optional[float] = None) -> Proxy:
    listen = str(tmp / f"{name}.sock")
    log = tmp / f"{name}.log"
    config = tmp / "config.toml"
    config.write_text('pinned_images = ["example.test/bench-1*"]\n')
    env = {**os.environ, "CONTAINERD_ADDRESS": upstream, "PINCTL_CONFIG": str(config), **env_extra}
    with open(log, "wb") as out:
        refreshing = [] if refresh is None else ["--refresh", str(refresh)]
        proc = subprocess.Popen([PINCTL, "cri-proxy", "--listen", listen, "-r", f"unix://{upstream}", "--relay", relay,
                                 *refreshing], env=env, stdout=subprocess.DEVNULL, stderr=out)
    deadline = time.monotonic() + 20
    while not os.path.exists(listen):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit(f"the proxy {name} did not start: {log.read_text(errors='replace')[-500:]}")
        time.sleep(0.05)
    return Proxy(name, proc, listen, log)


def threads_of(pid: int) -> list[Path]:
    try:
        return list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return []


def sched_totals(pid: int) -> tuple[float, int, int]:
    """Seconds the threads of pid waited runnable, their timeslices and involuntary switches, so far."""
    waited, slices, preempted = 0.0, 0, 0
    for task in threads_of(pid):
        try:
            schedstat = (task / "schedstat").read_text().split()
            waited += int(schedstat[1]) / 1e9
            slices += int(schedstat[2])
            found = re.search(r"nonvoluntary_ctxt_switches:\s+(\d+)", (task / "status").read_text())
            preempted += int(found.group(1)) if found else 0
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return waited, slices, preempted


SYS_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}.get(os.uname().machine)


def set_slice(pids: list[int], nanoseconds: int) -> None:
    """sched_setattr(SCHED_OTHER, nice kept, sched_runtime) on every thread of pids: on a fair task
    the runtime is the slice it asks for (0: the default again)."""
    import ctypes
    import struct

    if SYS_SCHED_SETATTR is None:
        raise SystemExit("relay-slice: sched_setattr's number is not known for this machine")
    libc = ctypes.CDLL(None, use_errno=True)
    for pid in pids:
        for task in threads_of(pid):
            tid = int(task.name)
            try:
                nice = os.getpriority(os.PRIO_PROCESS, tid)
            except ProcessLookupError:
                continue
            # struct sched_attr, version 1 (56 bytes): size, policy, flags, nice, priority, runtime,
            # deadline, period, util_min, util_max.
            attr = ctypes.create_string_buffer(struct.pack("=IIQiIQQQII", 56, 0, 0, nice, 0, nanoseconds, 0, 0, 0, 0))
            if libc.syscall(SYS_SCHED_SETATTR, tid, attr, 0) != 0:
                errno = ctypes.get_errno()
                if errno != 3:  # ESRCH: the thread ended meanwhile
                    raise OSError(errno, os.strerror(errno), f"sched_setattr of {task}")
    shown = Path(f"/proc/{pids[0]}/sched") if pids else None
    if nanoseconds and shown is not None and shown.exists():  # CONFIG_SCHED_DEBUG: the slice the kernel took
        progress("relay slice now " + " ".join(re.findall(r"se\.slice\s+:\s+(\d+)", shown.read_text())) + " ns")


def set_thread_nice(pids: list[int], nice: int) -> None:
    for pid in pids:
        for task in threads_of(pid):
            try:
                os.setpriority(os.PRIO_PROCESS, int(task.name), nice)
            except ProcessLookupError:
                pass


def set_group_nice(pids: list[int], nice: int) -> None:
    """The autogroup of each pid weighs as nice (each relay leads a session of its own)."""
    if Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() != "1":
        raise SystemExit("relay-group: kernel.sched_autogroup_enabled is 0 here; a cgroup's cpu.weight is the lever")
    for pid in pids:
        Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")


def set_fifo(pids: list[int], on: bool) -> None:
    policy = ["-f", "10"] if on else ["-o", "0"]
    for pid in pids:
        subprocess.run(["chrt", "-a", *policy[:1], "-p", policy[1], str(pid)], check=True, stdout=subprocess.DEVNULL)


def start_load(count: int) -> list[subprocess.Popen[bytes]]:
    """count busy loops, each in a session (and so an autogroup) of its own, as other services."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(count)]


@dataclass
class Run:
    kind: str
    load: float
    names: list[str] = field(default_factory=list)
    seconds: list[list[float]] = field(default_factory=list)
    # per process, per 1,000 calls of all addresses together
    waited: dict[str, float] = field(default_factory=dict)  # seconds
    slices: dict[str, float] = field(default_factory=dict)
    preempted: dict[str, float] = field(default_factory=dict)
    go_collections: dict[str, int] = field(default_factory=dict)


def switch(kind: str, relay_pids: list[int], every_pid: list[int], on: bool) -> None:
    """Turn a kind's setting on before its run, and off again after it."""
    if kind == "fifo":
        set_fifo(every_pid, on)
    if kind in ("relay-slice", "relay-slice-group"):
        set_slice(relay_pids, SLICE_NS if on else 0)
    if kind in ("relay-group", "relay-slice-group"):
        set_group_nice(relay_pids, GROUP_NICE if on else 0)
    if kind == "relay-nice":
        set_thread_nice(relay_pids, THREAD_NICE if on else 0)
    if kind == "client-gc-off":
        if on:
            gc.collect()
            gc.disable()
        else:
            gc.enable()


def one_run(kind: str, names: list[str], calls: list[grpc.UnaryUnaryMultiCallable], requests: list[bytes],
            rounds: int, watched: dict[str, list[int]], proxies: list[Proxy]) -> Run:
    run = Run(kind, os.getloadavg()[0], names)
    before = {name: [sched_totals(pid) for pid in pids] for name, pids in watched.items()}
    collections = {proxy.name: proxy.go_collections() for proxy in proxies}
    every_pid = [pid for pids in watched.values() for pid in pids]
    relay_pids = [pid for proxy in proxies if proxy.name != "python" for pid in proxy.relay_pids()]
    switch(kind, relay_pids, every_pid, True)
    try:
        run.seconds = timed_rounds(calls, rounds, requests)
    finally:
        switch(kind, relay_pids, every_pid, False)
    total_calls = rounds * len(calls) / 1000
    for name, pids in watched.items():
        after = [sched_totals(pid) for pid in pids]
        run.waited[name] = sum(a[0] - b[0] for a, b in zip(after, before[name])) / total_calls
        run.slices[name] = sum(a[1] - b[1] for a, b in zip(after, before[name])) / total_calls
        run.preempted[name] = sum(a[2] - b[2] for a, b in zip(after, before[name])) / total_calls
    run.go_collections = {proxy.name: proxy.go_collections() - collections[proxy.name] for proxy in proxies}
    return run


def slow_calls(run: Run) -> dict[str, tuple[int, int, int]]:
    """Per address: calls over its p50 + 1 ms, how many with a slow direct call within one round,
    and how many in the run's first 10 %."""
    direct = run.seconds[0]
    line = statistics.median(direct) + SLOW_OVER_P50
    direct_slow = {i for i, s in enumerate(direct) if s > line}
    found = {}
    for name, seconds in zip(run.names, run.seconds):
        line = statistics.median(seconds) + SLOW_OVER_P50
        slow = [i for i, s in enumerate(seconds) if s > line]
        shared = sum(1 for i in slow if direct_slow & {i - 1, i, i + 1})
        early = sum(1 for i in slow if i < len(seconds) // 10)
        found[name] = (len(slow), shared, early)
    return found


def report(runs: list[Run], opts: argparse.Namespace) -> None:
    names = runs[0].names
    print(f"{opts.method} on {opts.engine}, {opts.images} images, {opts.calls} calls per address per run, "
          f"{opts.load} busy loops; load average (1 min) at each run's start in the third column")
    print("| run | kind | load | " + " | ".join(f"{name} p50 / p99" for name in names) + " | "
          + " | ".join(f"{name} p99 added" for name in names[1:]) + " |")
    print("| --- " * (3 + 2 * len(names) - 1) + "|")
    for number, run in enumerate(runs, 1):
        p50 = [percentile(s, 0.5) for s in run.seconds]
        p99 = [percentile(s, 0.99) for s in run.seconds]
        print(f"| {number} | {run.kind} | {run.load:.2f} | "
              + " | ".join(f"{a * MS:.3f} / {b * MS:.3f}" for a, b in zip(p50, p99)) + " | "
              + " | ".join(f"{(b - p99[0]) * MS:+.3f}" for b in p99[1:]) + " |")
    print()
    print("Per 1,000 calls (all addresses together), per process: ms waited runnable (run_delay) / times put on a"
          " CPU / involuntary switches; Go collections in the run")
    processes = list(runs[0].waited)
    print("| run | kind | " + " | ".join(processes) + " | Go GCs |")
    print("| --- " * (3 + len(processes)) + "|")
    for number, run in enumerate(runs, 1):
        gcs = ", ".join(f"{name} {count}" for name, count in run.go_collections.items() if name != "python")
        print(f"| {number} | {run.kind} | "
              + " | ".join(f"{run.waited[n] * MS:.1f} / {run.slices[n]:.0f} / {run.preempted[n]:.1f}" for n in processes)
              + f" | {gcs} |")
    print()
    print("Calls over their address's p50 + 1 ms: count (with a slow direct call within one round, in the first 10 %)")
    print("| run | kind | " + " | ".join(names) + " |")
    print("| --- " * (2 + len(names)) + "|")
    for number, run in enumerate(runs, 1):
        found = slow_calls(run)
        print(f"| {number} | {run.kind} | " + " | ".join(f"{n} ({s}, {e})" for n, s, e in found.values()) + " |")
    print()
    print("p99 added (ms) over the runs of each kind, in the order they ran, and their median; goal: under 1 ms")
    for kind in KINDS:
        of_kind = [run for run in runs if run.kind == kind]
        if not of_kind:
            continue
        parts = []
        for i in range(1, len(names)):
            added = [(percentile(r.seconds[i], 0.99) - percentile(r.seconds[0], 0.99)) * MS for r in of_kind]
            parts.append(f"{names[i]} " + ", ".join(f"{a:+.3f}" for a in added)
                         + f" (median {statistics.median(added):+.3f}, {sum(a < 1 for a in added)} of {len(added)} under 1 ms)")
        print(f"- {kind}: " + "; ".join(parts))


def requests_for(method: str, images: int) -> list[bytes]:
    return image_status_requests(images) if method == "imagestatus" else [b""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", choices=sorted(METHODS), default="imagestatus")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3, help="runs of each kind")
    parser.add_argument("--calls", type=int, default=10000, help="calls per address per run")
    parser.add_argument("--engine", default=ENGINE)
    parser.add_argument("--kinds", default="plain,relay-slice,relay-group,relay-slice-group")
    parser.add_argument("--proxies", default="relay", help="of " + ", ".join(PROXIES))
    parser.add_argument("--other-relay", help="the relay binary of proxy 'other' (another tree's build)")
    parser.add_argument("--load", type=int, default=0, help="busy loops beside the calls")
    parser.add_argument("--refresh", type=float, help="cri-proxy's --refresh (default: its own)")
    parser.add_argument("--save", type=Path, help="write every run's figures and latencies here (JSON)")
    opts = parser.parse_args()
    from pinctl.criproxy.relay import find_relay

    relay = find_relay("auto")
    if relay is None:
        raise SystemExit("pinctl-cri-relay is not built: scripts/build-relay")
    kinds = opts.kinds.split(",")
    chosen = opts.proxies.split(",")
    for name in (*kinds, *chosen):
        if name not in KINDS and name not in PROXIES:
            raise SystemExit(f"{name}: not a kind ({', '.join(KINDS)}) nor a proxy ({', '.join(PROXIES)})")
    if "other" in chosen and not opts.other_relay:
        raise SystemExit("--proxies other needs --other-relay PATH")
    ways = {"relay": relay, "python": "python", "other": opts.other_relay}
    requests = requests_for(opts.method, opts.images)
    load = start_load(opts.load)
    try:
        with containerd_with_images(opts.images, engine=opts.engine) as daemon, \
                tempfile.TemporaryDirectory(dir="/tmp") as tmp:
            proxies = [start_proxy(name, daemon.address, Path(tmp), ways[PROXIES[name][0]],
                                   {"GODEBUG": "gctrace=1", **PROXIES[name][1]}, opts.refresh) for name in chosen]
            channels = [grpc.insecure_channel(f"unix://{address}", options=CHANNEL_OPTIONS)
                        for address in [daemon.address, *(proxy.listen for proxy in proxies)]]
            try:
                calls = [channel.unary_unary(METHODS[opts.method]) for channel in channels]
                timed_rounds(calls, 100, requests)  # connections open, pins read
                watched = {"containerd": [daemon.pid or 0], "client": [os.getpid()]}
                watched.update({proxy.name: proxy.pids() for proxy in proxies})
                runs = []
                for _ in range(opts.runs):
                    for kind in kinds:
                        runs.append(one_run(kind, ["direct", *chosen], calls, requests, opts.calls, watched, proxies))
                        progress(f"run {len(runs)} ({kind}) done")
            finally:
                for channel in channels:
                    channel.close()
                for proxy in proxies:
                    proxy.proc.send_signal(signal.SIGTERM)
                    proxy.proc.wait(15)
    finally:
        for loop in load:
            loop.kill()
            loop.wait()
    if opts.save:
        opts.save.write_text(json.dumps([dataclasses.asdict(run) for run in runs]))
    report(runs, opts)
    return 0


if __name__ == "__main__":
    sys.exit(main())

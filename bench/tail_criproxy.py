"""Issue 44: where the p99 of a unary call through `pinctl cri-proxy` comes from.

Run from the repository root, as root:
    .venv/bin/python -m bench.tail_criproxy [--runs 3] [--calls 5000] [--kinds plain,fifo,relay-slice]
        [--engine containerd-1.7] [--save runs.json]

One containerd (a few images: Version does not read them) and four proxies in front of it: the
relay as pinctl starts it (GOMAXPROCS 1), the relay with Go's collector off (GOGC=off), the relay
with GOMAXPROCS=2, and `--relay python`. The relays log each Go collection (GODEBUG=gctrace=1).
Version calls go round-robin to the daemon and the four, as bench_criproxy does, in runs of each
kind taken in turn, so that each kind sees the same machine:

- plain: as bench_criproxy;
- client-gc-off: this process's collector off during the calls (it times every call);
- fifo: every thread of containerd, the proxies, their relays and this process SCHED_FIFO
  (chrt -a -f 10) during the calls, so that no other program's thread runs before them;
- relay-slice: every thread of the three relays (and their pinctl) asks the kernel's EEVDF
  scheduler (Linux 6.12 and later) for a 0.1 ms slice instead of the default (sched_setattr's
  sched_runtime), so that a woken relay thread preempts a running one sooner; nothing else changes.

For each run: p50 and p99 per address and p99 added, the Go collections in each relay, the time
each process's threads waited runnable on a CPU (schedstat's run_delay) and how often they were
preempted (nonvoluntary_ctxt_switches), per 1,000 calls; the calls over p50 + 1 ms and how many of
them had a slow direct call in the same or a neighbouring round (a stall of the whole machine, not
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

import grpc

from bench.bench_criproxy import VERSION, percentile, timed_rounds
from bench.common import ENGINE, PINCTL, containerd_with_images, progress

ADDRESSES = ("direct", "relay", "relay GOGC=off", "relay GOMAXPROCS=2", "python")
KINDS = ("plain", "client-gc-off", "fifo", "relay-slice")
SLOW_OVER_P50 = 0.001
MS = 1000.0


@dataclass
class Proxy:
    name: str
    proc: subprocess.Popen[bytes]
    listen: str
    log: Path

    def pids(self) -> list[int]:
        """pinctl and its relay (a child of its own session) if it has one."""
        children = [int(pid) for task in threads_of(self.proc.pid) for pid in (task / "children").read_text().split()]
        return [self.proc.pid, *children]

    def go_collections(self) -> int:
        return len(re.findall(r"^gc \d+ @", self.log.read_text(errors="replace"), re.M))


def start_proxy(name: str, upstream: str, tmp: Path, relay: str, env_extra: dict[str, str]) -> Proxy:
    listen = str(tmp / f"{name.replace(' ', '-').replace('=', '-')}.sock")
    log = tmp / f"{Path(listen).stem}.log"
    config = tmp / "config.toml"
    config.write_text('pinned_images = ["example.test/bench-1*"]\n')
    env = {**os.environ, "CONTAINERD_ADDRESS": upstream, "PINCTL_CONFIG": str(config), **env_extra}
    with open(log, "wb") as out:
        proc = subprocess.Popen([PINCTL, "cri-proxy", "--listen", listen, "-r", f"unix://{upstream}", "--relay", relay],
                                env=env, stdout=subprocess.DEVNULL, stderr=out)
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


def sched_totals(pid: int) -> tuple[float, int]:
    """Seconds the threads of pid waited runnable, and their involuntary switches, so far."""
    waited, preempted = 0.0, 0
    for task in threads_of(pid):
        try:
            waited += int((task / "schedstat").read_text().split()[1]) / 1e9
            found = re.search(r"nonvoluntary_ctxt_switches:\s+(\d+)", (task / "status").read_text())
            preempted += int(found.group(1)) if found else 0
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return waited, preempted


SYS_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}.get(os.uname().machine)


def set_slice(pids: list[int], nanoseconds: int) -> None:
    """sched_setattr(SCHED_OTHER, nice 0, sched_runtime) on every thread of pids: on a fair task the
    runtime is the slice it asks for (0: the default again)."""
    import ctypes
    import struct

    if SYS_SCHED_SETATTR is None:
        raise SystemExit("relay-slice: sched_setattr's number is not known for this machine")
    libc = ctypes.CDLL(None, use_errno=True)
    # struct sched_attr, version 1 (56 bytes): size, policy, flags, nice, priority, runtime,
    # deadline, period, util_min, util_max.
    attr = ctypes.create_string_buffer(struct.pack("=IIQiIQQQII", 56, 0, 0, 0, 0, nanoseconds, 0, 0, 0, 0))
    for pid in pids:
        for task in threads_of(pid):
            if libc.syscall(SYS_SCHED_SETATTR, int(task.name), attr, 0) != 0:
                errno = ctypes.get_errno()
                if errno != 3:  # ESRCH: the thread ended meanwhile
                    raise OSError(errno, os.strerror(errno), f"sched_setattr of {task}")
    shown = Path(f"/proc/{pids[0]}/sched")
    if shown.exists():  # CONFIG_SCHED_DEBUG: the slice the kernel took
        progress("relay slice now " + " ".join(re.findall(r"se\.slice\s+:\s+(\d+)", shown.read_text())) + " ns")


def set_fifo(pids: list[int], on: bool) -> None:
    policy = ["-f", "10"] if on else ["-o", "0"]
    for pid in pids:
        subprocess.run(["chrt", "-a", *policy[:1], "-p", policy[1], str(pid)], check=True, stdout=subprocess.DEVNULL)


@dataclass
class Run:
    kind: str
    load: float
    seconds: list[list[float]] = field(default_factory=list)
    waited: dict[str, float] = field(default_factory=dict)  # seconds per 1,000 calls, all addresses together
    preempted: dict[str, float] = field(default_factory=dict)
    go_collections: dict[str, int] = field(default_factory=dict)


def one_run(kind: str, calls: list[grpc.UnaryUnaryMultiCallable], rounds: int, watched: dict[str, list[int]],
            proxies: list[Proxy]) -> Run:
    run = Run(kind, os.getloadavg()[0])
    before = {name: [sched_totals(pid) for pid in pids] for name, pids in watched.items()}
    collections = {proxy.name: proxy.go_collections() for proxy in proxies}
    every_pid = [pid for pids in watched.values() for pid in pids]
    relay_pids = [pid for name, pids in watched.items() if name.startswith("relay") for pid in pids]
    if kind == "fifo":
        set_fifo(every_pid, True)
    if kind == "relay-slice":
        set_slice(relay_pids, 100_000)
    if kind == "client-gc-off":
        gc.collect()
        gc.disable()
    try:
        found = timed_rounds(calls, rounds)
    finally:
        gc.enable()
        if kind == "fifo":
            set_fifo(every_pid, False)
        if kind == "relay-slice":
            set_slice(relay_pids, 0)
    run.seconds = found
    total_calls = rounds * len(calls) / 1000
    for name, pids in watched.items():
        after = [sched_totals(pid) for pid in pids]
        run.waited[name] = sum(a[0] - b[0] for a, b in zip(after, before[name])) / total_calls
        run.preempted[name] = sum(a[1] - b[1] for a, b in zip(after, before[name])) / total_calls
    run.go_collections = {proxy.name: proxy.go_collections() - collections[proxy.name] for proxy in proxies}
    return run


def slow_calls(run: Run) -> dict[str, tuple[int, int, int]]:
    """Per address: calls over its p50 + 1 ms, how many with a slow direct call within one round,
    and how many in the run's first 10 %."""
    direct = run.seconds[0]
    line = statistics.median(direct) + SLOW_OVER_P50
    direct_slow = {i for i, s in enumerate(direct) if s > line}
    found = {}
    for name, seconds in zip(ADDRESSES, run.seconds):
        line = statistics.median(seconds) + SLOW_OVER_P50
        slow = [i for i, s in enumerate(seconds) if s > line]
        shared = sum(1 for i in slow if direct_slow & {i - 1, i, i + 1})
        early = sum(1 for i in slow if i < len(seconds) // 10)
        found[name] = (len(slow), shared, early)
    return found


def report(runs: list[Run], calls: int) -> None:
    print(f"Version, {calls} calls per address per run; load average (1 min) at each run's start in the first column")
    print("| run | kind | load | " + " | ".join(f"{name} p50 / p99" for name in ADDRESSES) + " | "
          + " | ".join(f"{name} p99 added" for name in ADDRESSES[1:]) + " |")
    print("| --- " * (3 + 2 * len(ADDRESSES) - 1) + "|")
    for number, run in enumerate(runs, 1):
        p50 = [percentile(s, 0.5) for s in run.seconds]
        p99 = [percentile(s, 0.99) for s in run.seconds]
        print(f"| {number} | {run.kind} | {run.load:.2f} | "
              + " | ".join(f"{a * MS:.3f} / {b * MS:.3f}" for a, b in zip(p50, p99)) + " | "
              + " | ".join(f"{(b - p99[0]) * MS:+.3f}" for b in p99[1:]) + " |")
    print()
    print("Per 1,000 calls (all addresses together): ms waited runnable (run_delay) / involuntary switches, per process;"
          " Go collections in the run")
    names = list(runs[0].waited)
    print("| run | kind | " + " | ".join(names) + " | Go GCs (relay, GOGC=off, GOMAXPROCS=2) |")
    print("| --- " * (3 + len(names)) + "|")
    for number, run in enumerate(runs, 1):
        gcs = ", ".join(str(run.go_collections.get(name, "-")) for name in ADDRESSES[1:4])
        print(f"| {number} | {run.kind} | "
              + " | ".join(f"{run.waited[n] * MS:.1f} / {run.preempted[n]:.1f}" for n in names) + f" | {gcs} |")
    print()
    print("Calls over their address's p50 + 1 ms: count (with a slow direct call within one round, in the first 10 %)")
    print("| run | kind | " + " | ".join(ADDRESSES) + " |")
    print("| --- " * (2 + len(ADDRESSES)) + "|")
    for number, run in enumerate(runs, 1):
        found = slow_calls(run)
        print(f"| {number} | {run.kind} | " + " | ".join(f"{n} ({s}, {e})" for n, s, e in found.values()) + " |")
    print()
    print("Median over the runs of each kind, p99 added (ms):")
    for kind in KINDS:
        of_kind = [run for run in runs if run.kind == kind]
        if not of_kind:
            continue
        added = [statistics.median((percentile(r.seconds[i], 0.99) - percentile(r.seconds[0], 0.99)) * MS for r in of_kind)
                 for i in range(1, len(ADDRESSES))]
        print(f"- {kind} ({len(of_kind)} runs): " + ", ".join(f"{n} {a:+.3f}" for n, a in zip(ADDRESSES[1:], added)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each kind")
    parser.add_argument("--calls", type=int, default=5000, help="Version calls per address per run")
    parser.add_argument("--engine", default=ENGINE)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--save", type=Path, help="write every run's figures and latencies here (JSON)")
    opts = parser.parse_args()
    from pinctl.criproxy.relay import find_relay

    relay = find_relay("auto")
    if relay is None:
        raise SystemExit("pinctl-cri-relay is not built: scripts/build-relay")
    kinds = opts.kinds.split(",")
    with containerd_with_images(20, engine=opts.engine) as daemon, tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        trace = {"GODEBUG": "gctrace=1"}
        extra = [trace, {**trace, "GOGC": "off"}, {**trace, "GOMAXPROCS": "2"}, {}]
        relays = [relay, relay, relay, "python"]
        proxies = [start_proxy(name, daemon.address, Path(tmp), way, env)
                   for name, way, env in zip(ADDRESSES[1:], relays, extra)]
        channels = [grpc.insecure_channel(f"unix://{address}")
                    for address in [daemon.address, *(proxy.listen for proxy in proxies)]]
        try:
            calls = [channel.unary_unary(VERSION) for channel in channels]
            for call in calls:
                for _ in range(100):
                    call(b"", timeout=30)
            watched = {"containerd": [daemon.pid or 0], "client": [os.getpid()]}
            watched.update({proxy.name: proxy.pids() for proxy in proxies})
            runs = []
            for number in range(opts.runs):
                for kind in kinds:
                    runs.append(one_run(kind, calls, opts.calls, watched, proxies))
                    progress(f"run {len(runs)} ({kind}) done")
        finally:
            for channel in channels:
                channel.close()
            for proxy in proxies:
                proxy.proc.send_signal(signal.SIGTERM)
                proxy.proc.wait(15)
    if opts.save:
        opts.save.write_text(json.dumps([dataclasses.asdict(run) for run in runs]))
    report(runs, opts.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())

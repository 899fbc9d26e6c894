"""Issue 2 benchmarks: ls and pin of 1,000 images beside ctr, and --help beside a bare python.

Run from the repository root, as root:  .venv/bin/python -m bench.bench_core [--images 1000]
"""

from __future__ import annotations

import argparse
import sys

from bench.common import PINCTL, containerd_with_images, median_time, report, run_once
from tests.harness.containerd import ContainerdDaemon

Row = tuple[str, float, str, float, float, str]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    with containerd_with_images(opts.images) as daemon:
        rows = [bench_ls(daemon, opts.images, opts.repeat), bench_pin(daemon, opts.images)]
    help_ours = median_time([PINCTL, "--help"], opts.repeat * 4)
    help_peer = median_time([sys.executable, "-c", "pass"], opts.repeat * 4)
    rows.append(("--help", help_ours, "python -c pass", help_peer, float("inf"), "within 150 ms"))
    print(report(rows))
    print(f"\n--help costs {(help_ours - help_peer) * 1000:.0f} ms more than a bare interpreter (goal <= 150 ms)")
    return 0


def ctr_argv(daemon: ContainerdDaemon) -> list[str]:
    return [str(daemon.bin_dir / "ctr"), "-a", daemon.address, "-n", "k8s.io"]


def bench_ls(daemon: ContainerdDaemon, count: int, repeat: int) -> Row:
    env = {"CONTAINERD_ADDRESS": daemon.address}
    ours = median_time([PINCTL, "ls", "-n", "k8s.io"], repeat, env)
    peer = median_time([*ctr_argv(daemon), "images", "ls"], repeat)
    return (f"ls, {count} images", ours, "ctr images ls", peer, 0.5, "<= 0.5x")


def bench_pin(daemon: ContainerdDaemon, count: int) -> Row:
    env = {"CONTAINERD_ADDRESS": daemon.address}
    refs = daemon.ctr("images", "ls", "-q").stdout.split()
    ctr = " ".join(ctr_argv(daemon))
    loop = f'{ctr} images ls -q | while read -r ref; do {ctr} images label "$ref" io.cri-containerd.pinned=pinned >/dev/null; done'
    peer = run_once([loop], shell=True)
    run_once([PINCTL, "unpin", "-n", "k8s.io", "-q", *refs], env)
    ours = run_once([PINCTL, "pin", "-n", "k8s.io", "-q", *refs], env)
    return (f"pin {count} images", ours, "ctr images label loop", peer, 1 / 20, "<= 0.05x")


if __name__ == "__main__":
    sys.exit(main())

"""Issue 2 benchmarks: ls and pin of 1,000 images beside ctr, and --help beside a bare python.

Run from the repository root, as root:
    .venv/bin/python -m bench.bench_core [--images 1000] [--engine containerd-2.4]
containerd 1.7 unless --engine names another containerd of tests/harness/engines.py.
"""

from __future__ import annotations

import argparse
import sys

from bench.common import ENGINE, PINCTL, Row, containerd_with_images, median_time, overhead_row, ratio_row, report, run_once
from tests.harness.containerd import ContainerdDaemon


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--engine", default=ENGINE, help=f"the containerd of tests/harness/engines.py (default {ENGINE})")
    opts = parser.parse_args()
    with containerd_with_images(opts.images, engine=opts.engine) as daemon:
        rows = [bench_ls(daemon, opts.images, opts.repeat), bench_pin(daemon, opts.images)]
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


def bench_pin(daemon: ContainerdDaemon, count: int) -> Row:
    env = {"CONTAINERD_ADDRESS": daemon.address}
    refs = daemon.ctr("images", "ls", "-q").stdout.split()
    ctr = " ".join(ctr_argv(daemon))
    loop = f'{ctr} images ls -q | while read -r ref; do {ctr} images label "$ref" io.cri-containerd.pinned=pinned >/dev/null; done'
    peer = run_once([loop], shell=True)
    run_once([PINCTL, "unpin", "-n", "k8s.io", "-q", *refs], env)
    ours = run_once([PINCTL, "pin", "-n", "k8s.io", "-q", *refs], env)
    return ratio_row(f"pin {len(refs)} refs of {count} images", ours, "ctr images label loop", peer, 1 / 20)


if __name__ == "__main__":
    sys.exit(main())

"""Issue 12 benchmark: `pinctl gc plan` over 1,000 images and 100 containers beside `ctr images ls`.

Run from the repository root, as root:  .venv/bin/python -m bench.bench_gc [--images 1000 --containers 100]
At issue 23's scale:  .venv/bin/python -m bench.bench_gc --images 10000 --containers 1000 --used-images 100 --fs-gib 4 --goal 1

A pod-capable containerd 1.7 (tests/harness/pods.py) on its own tmpfs: ``--containers`` runnable
images, each used by one created (never started) container in one pod, and plain images up to
``--images`` in all (``--used-images`` shares fewer images among the containers). Both commands run against the same daemon in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from bench.common import PINCTL, Row, median_measured, median_time, ratio_row, report
from tests.harness import images, pods, runnable

FS_BYTES = 1024 * 1024 * 1024


@contextlib.contextmanager
def node(image_count: int, container_count: int, used_count: int, fs_bytes: int) -> Iterator[pods.PodsDaemon]:
    """used_count runnable images, the containers spread over them in turn, plain images to the rest."""
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-") as tmp, \
            pods.pods_daemon("containerd-1.7", Path(tmp), fs_bytes) as (daemon, _fs):
        work = Path(tmp) / "work"
        used = runnable.load_runnable(daemon, work, [runnable.runnable_recipe(f"example.test/bench-used-{i}:1")
                                                 for i in range(used_count)])
        images.load_images(daemon, work, images.numbered_recipes(image_count - used_count - 1))
        made = pods.Pods(daemon)
        pod = made.pod()
        for i in range(container_count):
            made.container(used[i % used_count].refs[0], "created", pod=pod)
        yield daemon


def bench(daemon: pods.PodsDaemon, image_count: int, container_count: int, repeat: int, goal: float) -> list[Row]:
    env = {"CONTAINERD_ADDRESS": daemon.address, "CONTAINER_RUNTIME_ENDPOINT": f"unix://{daemon.address}",
           "PINCTL_CONTAINERD_CONFIG": str(daemon.config_path)}
    peer = median_time([str(daemon.bin_dir / "ctr"), "-a", daemon.address, "-n", "k8s.io", "images", "ls"], repeat)
    what = f"{image_count} images, {container_count} containers"
    plan = [PINCTL, "gc", "plan", "-n", "k8s.io", "--min-age", "0s"]
    rows = []
    # At 99% every unused image is in the deletion order and printed.
    for name, argv in ((f"gc plan, {what}", plan), (f"gc plan --usage 99 -o json, {what}", [*plan, "--usage", "99", "-o", "json"])):
        seconds, peak = median_measured(argv, repeat, env)
        rows.append(ratio_row(f"{name} (peak {peak / 2**20:.0f} MiB)", seconds, "ctr images ls", peer, goal))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--containers", type=int, default=100)
    parser.add_argument("--used-images", type=int, default=0, help="images the containers use (default: one each)")
    parser.add_argument("--fs-gib", type=float, default=FS_BYTES / 2**30, help="size of the image filesystem")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--goal", type=float, default=0.5, help="ratio to ctr images ls (issue 23: 1 at 10,000 images)")
    opts = parser.parse_args()
    used = opts.used_images or opts.containers
    with node(opts.images, opts.containers, used, int(opts.fs_gib * 2**30)) as daemon:
        listed = daemon.ctr("images", "ls", "-q").stdout.split()
        print(f"k8s.io: {len(listed)} references; containers: {opts.containers}", file=sys.stderr)
        rows = bench(daemon, opts.images, opts.containers, opts.repeat, opts.goal)
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

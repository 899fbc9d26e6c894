"""Issue 12 benchmark: `pinctl gc plan` over 1,000 images and 100 containers beside `ctr images ls`.

Run from the repository root, as root:  .venv/bin/python -m bench.bench_gc [--images 1000 --containers 100]

A pod-capable containerd 1.7 (tests/harness/pods.py) on its own tmpfs: ``--containers`` runnable
images, each used by one created (never started) container in one pod, and plain images up to
``--images`` in all. Both commands run against the same daemon in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from bench.common import PINCTL, Row, median_time, ratio_row, report
from tests.harness import images, pods

FS_BYTES = 1024 * 1024 * 1024


@contextlib.contextmanager
def node(image_count: int, container_count: int) -> Iterator[pods.PodsDaemon]:
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-") as tmp, \
            pods.pods_daemon("containerd-1.7", Path(tmp), FS_BYTES) as (daemon, _fs):
        work = Path(tmp) / "work"
        used = pods.load_runnable(daemon, work, [pods.runnable_recipe(f"example.test/bench-used-{i}:1")
                                                 for i in range(container_count)])
        images.load_images(daemon, work, images.numbered_recipes(image_count - container_count - 1))
        made = pods.Pods(daemon)
        pod = made.pod()
        for info in used:
            made.container(info.refs[0], "created", pod=pod)
        yield daemon


def bench(daemon: pods.PodsDaemon, image_count: int, container_count: int, repeat: int) -> list[Row]:
    env = {"CONTAINERD_ADDRESS": daemon.address, "CONTAINER_RUNTIME_ENDPOINT": f"unix://{daemon.address}",
           "PINCTL_CONTAINERD_CONFIG": str(daemon.config_path)}
    peer = median_time([str(daemon.bin_dir / "ctr"), "-a", daemon.address, "-n", "k8s.io", "images", "ls"], repeat)
    what = f"{image_count} images, {container_count} containers"
    plan = [PINCTL, "gc", "plan", "-n", "k8s.io", "--min-age", "0s"]
    # At 99% every unused image is in the deletion order and printed.
    return [ratio_row(f"gc plan, {what}", median_time(plan, repeat, env), "ctr images ls", peer, 0.5),
            ratio_row(f"gc plan --usage 99 -o json, {what}",
                      median_time([*plan, "--usage", "99", "-o", "json"], repeat, env), "ctr images ls", peer, 0.5)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--containers", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    with node(opts.images, opts.containers) as daemon:
        listed = daemon.ctr("images", "ls", "-q").stdout.split()
        print(f"k8s.io: {len(listed)} references; containers: {opts.containers}", file=sys.stderr)
        rows = bench(daemon, opts.images, opts.containers, opts.repeat)
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

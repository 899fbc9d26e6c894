"""Issue 32 benchmark: how close ls, check, gc plan and sync come to the floor of a listing.

Run from the repository root, as root:
    .venv/bin/python -m bench.bench_floor [--images 1000,10000] [--repeat 3]

For each image count, the root of one containerd 1.7 on disk (/var/tmp) and then on tmpfs, and
the images with one record each (namespace `bench`, where no CRI adds a `sha256:` reference)
and with two (`k8s.io`, where the CRI does): in the same run it times `ctr images ls -q`,
`pinctl ls -q` and `pinctl ls` (into a pipe), and with two records `check`, `gc plan` and
`sync --dry-run`, each against `ls -q` on that daemon. Peak memory is the kernel's ru_maxrss.
`floor` is this Python importing the three libraries every pinctl command loads (click, grpc,
protobuf) and doing nothing else, beside ctr with ls -q's goal: no Python program on them can
list faster than that.
Issue 32's targets: ls within 2x of ls -q; ls -q within 3x of ctr images ls -q; check, gc plan
and sync --dry-run within 2x of ls -q.

Each node gets a target cache of its own (PINCTL_CACHE_DIR): the timed runs follow a warm-up, so
they find it filled, as every run after a node's first does. `ls, cache empty` times the first
run (the cache removed before each), beside ls -q, with no goal: it reads every manifest.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Optional

from bench.bench_scale import env_for, write_policy
from bench.common import PINCTL, containerd_with_images, median_measured, run_measured

LS_OVER_QUIET = 2.0
QUIET_OVER_CTR = 3.0
OTHER_OVER_QUIET = 2.0
FLOOR_IMPORTS = "import click, grpc, google.protobuf.message"


def row(name: str, seconds: float, peak: int, peer: str, peer_seconds: float, goal: Optional[float]) -> str:
    ratio = seconds / peer_seconds
    judged = "| - | - |" if goal is None else f"| <= {goal:g}x | {'yes' if ratio <= goal else 'no'} |"
    return (f"| {name} | {seconds * 1000:.0f} ms | {peak / 2**20:.0f} MiB | {peer} {peer_seconds * 1000:.0f} ms | "
            f"{ratio:.2f} {judged}")


def cold_measured(argv: list[str], repeat: int, env: dict[str, str]) -> tuple[float, int]:
    """Median seconds and peak memory of runs that each start with no target cache."""
    runs = []
    for _ in range(repeat):
        shutil.rmtree(env["PINCTL_CACHE_DIR"], ignore_errors=True)
        runs.append(run_measured(argv, env))
    return statistics.median(t for t, _ in runs), max(m for _, m in runs)


def one_node(images: int, on_disk: bool, namespace: str, repeat: int, tmp: Path,
             pinctl_src: Optional[str] = None) -> list[str]:
    where = f"{images} images, {'disk' if on_disk else 'tmpfs'}, {'1 record' if namespace == 'bench' else '2 records'}"
    with containerd_with_images(images, namespace, on_disk=on_disk) as daemon:
        env = env_for(daemon, write_policy(tmp / "one.toml", 1))
        if pinctl_src:
            env["PYTHONPATH"] = pinctl_src
        ctr = [str(daemon.bin_dir / "ctr"), "-a", daemon.address, "-n", namespace, "images", "ls", "-q"]
        ctr_quiet, _ = median_measured(ctr, repeat)
        floor, floor_peak = median_measured([sys.executable, "-c", FLOOR_IMPORTS], repeat)
        quiet, quiet_peak = median_measured([PINCTL, "ls", "-n", namespace, "-q"], repeat, env)
        cold, cold_peak = cold_measured([PINCTL, "ls", "-n", namespace], repeat, env)
        table, table_peak = median_measured([PINCTL, "ls", "-n", namespace], repeat, env)
        rows = [row(f"floor: click, grpc, protobuf imported, {where}", floor, floor_peak, "ctr images ls -q", ctr_quiet,
                    QUIET_OVER_CTR),
                row(f"ls -q, {where}", quiet, quiet_peak, "ctr images ls -q", ctr_quiet, QUIET_OVER_CTR),
                row(f"ls, {where}", table, table_peak, "ls -q", quiet, LS_OVER_QUIET),
                row(f"ls, cache empty, {where}", cold, cold_peak, "ls -q", quiet, None)]
        if namespace == "k8s.io":
            for name, argv in (("check", ["check"]), ("gc plan", ["gc", "plan", "-n", "k8s.io", "--min-age", "0s"]),
                               ("sync --dry-run", ["sync", "--dry-run", "-q"])):
                seconds, peak = median_measured([PINCTL, *argv], repeat, env)
                rows.append(row(f"{name}, {where}", seconds, peak, "ls -q", quiet, OTHER_OVER_QUIET))
        return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", default="1000,10000", help="image counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pinctl-src", help="run the pinctl of this src/ directory instead")
    opts = parser.parse_args()
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-") as tmp:
        for images in (int(n) for n in opts.images.split(",")):
            for on_disk in (True, False):
                for namespace in ("bench", "k8s.io"):
                    rows += one_node(images, on_disk, namespace, opts.repeat, Path(tmp), opts.pinctl_src)
                    print(f"done: {images} images, {'disk' if on_disk else 'tmpfs'}, {namespace}", file=sys.stderr)
    print("| benchmark | pinctl | peak memory | beside | ratio | goal | met |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

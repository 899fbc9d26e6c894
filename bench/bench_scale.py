"""Issue 23 benchmark: time and peak memory of the one-shot commands at 1,000 to 20,000 images.

Run from the repository root, as root:
    .venv/bin/python -m bench.bench_scale [--images 1000,10000,20000] [--patterns 1000,10000,20000]
        [--engine containerd-2.4] [--pin]

For each image count, one containerd (1.7 unless --engine names another engine of
tests/harness/engines.py) on tmpfs holds that many distinct images in k8s.io (the
CRI adds a sha256: reference to each, so twice as many records). In the same run, beside
`ctr images ls` on that daemon, it times `pinctl ls` (table into a pipe, and -o json),
`sync --dry-run`, `check` and `gc plan`, and takes each run's peak resident memory from the
kernel (ru_maxrss). At the middle image count it also runs `ls` with each pattern count (a third
each exact names, prefix globs and keywords) to show the cost is linear in patterns too. With
--pin, last (it labels every image): `pin` of every reference beside bench_core's ctr label loop,
each run once; its peak memory is not measured, and its goal is bench_core's 0.05x. Two more pin
rows show containerd's floor beside it (bench_core.bench_pin): the same Gets and Updates from a
minimal client, and the CPU seconds containerd spent during pinctl's pin.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.bench_core import bench_pin
from bench.common import ENGINE, PINCTL, containerd_with_images, median_measured, progress
from tests.harness.containerd import ContainerdDaemon

MEMORY_GOAL = 150 * 1024 * 1024
# The memory goal is issue 23's, at 10,000 images; 20,000 is measured to show time is linear.
MEMORY_GOAL_UP_TO = 10_000
# ls against ctr images ls; gc plan's goal is 1x, measured with containers in bench_gc.
LS_GOAL = 0.25
OTHER_GOAL = 1.0


@dataclass(frozen=True)
class Measured:
    name: str
    images: int
    seconds: float
    peak: int
    peer_seconds: float
    goal: float

    def row(self) -> str:
        ratio = self.seconds / self.peer_seconds
        memory_goal = self.images <= MEMORY_GOAL_UP_TO
        met = ratio <= self.goal and (self.peak < MEMORY_GOAL or not memory_goal)
        goal = f"<= {self.goal:g}x" + (", < 150 MiB" if memory_goal else "")
        return (f"| {self.name} | {self.seconds * 1000:.0f} ms | {self.peak / 2**20:.0f} MiB | "
                f"{self.peer_seconds * 1000:.0f} ms | {ratio:.3f} | {goal} | {'yes' if met else 'no'} |")


def write_policy(path: Path, count: int) -> Path:
    """count patterns: exact names and prefixes of images that exist, and keywords."""
    shapes = (lambda i: f"example.test/bench-{i}:1.0", lambda i: f"example.test/bench-{i}*", lambda i: f"*kw{i}x*")
    lines = [f'  "{shapes[i % 3](i)}",\n' for i in range(count)]
    path.write_text("pinned_images = [\n" + "".join(lines) + "]\n")
    return path


def env_for(daemon: ContainerdDaemon, policy: Path) -> dict[str, str]:
    # The target cache beside the policy: a benchmark's runs share theirs, never the machine's.
    return {"CONTAINERD_ADDRESS": daemon.address, "CONTAINER_RUNTIME_ENDPOINT": f"unix://{daemon.address}",
            "PINCTL_CONTAINERD_CONFIG": str(daemon.config_path), "PINCTL_CONFIG": str(policy),
            "PINCTL_CACHE_DIR": str(policy.parent / "target-cache")}


def at_count(images: int, patterns: list[int], repeat: int, tmp: Path, engine: str = ENGINE,
             pin: bool = False) -> list[str]:
    with containerd_with_images(images, engine=engine) as daemon:
        ctr = [str(daemon.bin_dir / "ctr"), "-a", daemon.address, "-n", "k8s.io", "images", "ls"]
        peer, _ = median_measured(ctr, repeat)
        progress(f"ctr images ls: {peer * 1000:.0f} ms")
        env = env_for(daemon, write_policy(tmp / "one.toml", 1))
        commands = {"ls": (["ls", "-n", "k8s.io"], LS_GOAL), "ls -o json": (["ls", "-n", "k8s.io", "-o", "json"], LS_GOAL),
                    "sync --dry-run": (["sync", "--dry-run", "-q"], OTHER_GOAL), "check": (["check"], OTHER_GOAL),
                    "gc plan": (["gc", "plan", "-n", "k8s.io", "--min-age", "0s"], OTHER_GOAL)}
        found = []
        for name, (argv, goal) in commands.items():
            seconds, peak = median_measured([PINCTL, *argv], repeat, env)
            found.append(Measured(f"{name}, {images} images", images, seconds, peak, peer, goal))
            progress(f"{name}: {seconds * 1000:.0f} ms")
        for count in patterns:
            env = env_for(daemon, write_policy(tmp / f"{count}.toml", count))
            seconds, peak = median_measured([PINCTL, "ls", "-n", "k8s.io"], repeat, env)
            found.append(Measured(f"ls, {images} images, {count} patterns", images, seconds, peak, peer, LS_GOAL))
        rows = [row.row() for row in found]
        if pin:
            progress("pin: the ctr label loop, one ctr per reference (minutes at 10,000 images)")
            for pin_name, ours, peer_name, peer_time, pin_goal, met in bench_pin(daemon, images):
                rows.append(f"| {pin_name} | {ours * 1000:.0f} ms | - | {peer_time * 1000:.0f} ms ({peer_name}) | "
                            f"{ours / peer_time:.3f} | {pin_goal} | {'yes' if met else 'no'} |")
        return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", default="1000,10000,20000", help="image counts, comma-separated")
    parser.add_argument("--patterns", default="1000,10000,20000", help="pattern counts, at the middle image count")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--engine", default=ENGINE, help=f"the containerd of tests/harness/engines.py (default {ENGINE})")
    parser.add_argument("--pin", action="store_true", help="also pin every reference beside the ctr label loop")
    opts = parser.parse_args()
    counts = [int(n) for n in opts.images.split(",")]
    pattern_counts = [int(n) for n in opts.patterns.split(",") if n]
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-") as tmp:
        for images in counts:
            middle = images == counts[len(counts) // 2]
            rows += at_count(images, pattern_counts if middle else [], opts.repeat, Path(tmp), opts.engine, opts.pin)
            progress(f"done: {images} images")
    print(f"{opts.engine}, {opts.repeat} runs after a warm-up, medians")
    print("| benchmark | pinctl | peak memory | ctr images ls | ratio | goal | met |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A/B in one run: ``gc plan`` and ``ls`` at many images, an earlier commit against this tree.

One containerd 1.7 on tmpfs with that many images; each command runs from both trees (the
earlier one checked out with ``git worktree`` in a temporary directory, picked by
``PYTHONPATH``), alternating which goes first, after a warm-up of each; ``ctr images ls`` beside
them. A machine's speed changes from day to day: this says whether a change moved the figure.

    .venv/bin/python -m bench.ab_gc_scale --before 37947db --images 10000 --repeat 4
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_scale import env_for, write_policy
from bench.common import containerd_with_images

HERE = Path(__file__).resolve().parents[1]
COMMANDS = (["gc", "plan", "-n", "k8s.io", "--min-age", "0s"], ["ls", "-n", "k8s.io"])


def run(src: Path, argv: list[str], env: dict[str, str]) -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pinctl", *argv], env={**os.environ, **env, "PYTHONPATH": str(src)},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - began


def compare(before: Path, images: int, repeat: int, tmp: Path) -> list[str]:
    lines = []
    trees = {"before": before / "src", "after": HERE / "src"}
    with containerd_with_images(images) as daemon:
        env = env_for(daemon, write_policy(tmp / "one.toml", 1))
        for argv in COMMANDS:
            for src in trees.values():
                run(src, argv, env)  # warm-up
            found: dict[str, list[float]] = {name: [] for name in trees}
            for n in range(repeat):
                for name in (("before", "after") if n % 2 == 0 else ("after", "before")):
                    found[name].append(run(trees[name], argv, env))
            for name, values in found.items():
                lines.append(f"{' '.join(argv)}: {name} median {statistics.median(values):.2f}s "
                             f"({' '.join(f'{v:.2f}' for v in values)})")
        ctr = [str(daemon.bin_dir / "ctr"), "-a", daemon.address, "-n", "k8s.io", "images", "ls"]
        peer = []
        for _ in range(2):
            began = time.perf_counter()
            subprocess.run(ctr, stdout=subprocess.DEVNULL, check=True)
            peer.append(time.perf_counter() - began)
        lines.append(f"ctr images ls: median {statistics.median(peer):.2f}s ({' '.join(f'{v:.2f}' for v in peer)})")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the earlier commit")
    parser.add_argument("--images", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pinctl-ab-") as tmp:
        before = Path(tmp) / "before"
        print(f"checking out {args.before} in {before}", flush=True)
        subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", "-q", str(before), args.before], check=True)
        try:
            # Both trees with their bytecode written (PYTHONDONTWRITEBYTECODE would make the
            # fresh checkout compile itself on every run).
            for tree in (before, HERE):
                subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "src" / "pinctl")], check=True)
            print(f"starting containerd with {args.images} images", flush=True)
            for line in compare(before, args.images, args.repeat, Path(tmp)):
                print(line, flush=True)
        finally:
            subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(before)], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

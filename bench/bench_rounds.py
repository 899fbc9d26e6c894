"""Issue 32 benchmark: ls, check and gc plan beside ls -q, the four run in turn on one node.

Run from the repository root, as root:
    .venv/bin/python -m bench.bench_rounds [--images 10000] [--rounds 11] [--engine containerd-2.4]

bench_floor times each command's runs one after another; on a machine whose load drifts, a
command measured late is measured on another machine than one measured early. Here one containerd
(1.7 unless --engine names another engine of tests/harness/engines.py; root on tmpfs, the images
with two records each in k8s.io, its target cache warmed by one ls) serves rounds of `ls -q`, `ls`,
`check` and `gc plan`, each once per round, into a pipe; the medians over the rounds are compared
with `ls -q`'s, against issue 32's goal of 2x.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from bench.bench_scale import env_for, write_policy
from bench.common import ENGINE, PINCTL, containerd_with_images, progress, run_measured

GOAL = 2.0
COMMANDS = {
    "ls -q": ["ls", "-n", "k8s.io", "-q"],
    "ls": ["ls", "-n", "k8s.io"],
    "check": ["check"],
    "gc plan": ["gc", "plan", "-n", "k8s.io", "--min-age", "0s"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--engine", default=ENGINE, help=f"the containerd of tests/harness/engines.py (default {ENGINE})")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-") as tmp, \
            containerd_with_images(args.images, engine=args.engine) as daemon:
        env = env_for(daemon, write_policy(Path(tmp) / "one.toml", 1))
        run_measured([PINCTL, *COMMANDS["ls"]], env)  # the target cache, as after a node's first run
        seconds: dict[str, list[float]] = {name: [] for name in COMMANDS}
        for _ in range(args.rounds):
            for name, argv in COMMANDS.items():
                seconds[name].append(run_measured([PINCTL, *argv], env)[0])
            progress(f"round {len(seconds['ls -q'])} of {args.rounds} done")
    medians = {name: statistics.median(runs) for name, runs in seconds.items()}
    quiet = medians["ls -q"]
    print(f"| command, {args.engine}, {args.images} images, 2 records, tmpfs, {args.rounds} rounds "
          "| median | beside ls -q | goal | met |")
    print("| --- | --- | --- | --- | --- |")
    for name, median in medians.items():
        ratio = median / quiet
        judged = "| - | - |" if name == "ls -q" else f"| <= {GOAL:g}x | {'yes' if ratio <= GOAL else 'no'} |"
        print(f"| {name} | {median * 1000:.0f} ms | {ratio:.2f} {judged}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 32 and 53 benchmark: ls, check and gc plan beside ls -q, run in turns on one node, with the daemon's own floor.

Run from the repository root, as root:
    .venv/bin/python -m bench.bench_rounds [--images 10000] [--rounds 11] [--engine containerd-2.4] [--pinctl-src DIR]

bench_floor times each command's runs one after another; on a machine whose load drifts, a
command measured late is measured on another machine than one measured early. Here one containerd
(1.7 unless --engine names another engine of tests/harness/engines.py; root on tmpfs, the images
with two records each in k8s.io, its target cache warmed by one ls) serves rounds of `ls -q`, `ls`,
`check` and `gc plan`, each once per round, their output discarded; the medians over the rounds are compared
with `ls -q`'s, against issue 53's goal of 2x.

The same rounds time the daemon's answers from minimal Go clients: `ctr images ls -q` (containerd's
Images.List, which every pinctl command here reads) and `crictl images -q` (the CRI's ListImages,
which check and gc plan read besides). Their medians are the floor no client can go below: what
check and gc plan take beyond ls -q is, at the least, the CRI's list. The `client cpu` column is
the CPU time the client itself spent (user and system), the part a faster pinctl can shrink; the
rest of a run is waiting for the daemon. With --pinctl-src, check and gc plan of another src/
directory (a `git worktree` of an older commit) run in the same rounds too.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_scale import env_for, write_policy
from bench.common import ENGINE, PINCTL, containerd_with_images, progress
from tests.harness import engines, gobuild

GOAL = 2.0
COMMANDS = {
    "ls -q": ["ls", "-n", "k8s.io", "-q"],
    "ls": ["ls", "-n", "k8s.io"],
    "check": ["check"],
    "gc plan": ["gc", "plan", "-n", "k8s.io", "--min-age", "0s"],
}
# What the CRI tools would read instead of their flags.
CRI_ENV = ("CONTAINER_RUNTIME_ENDPOINT", "IMAGE_SERVICE_ENDPOINT", "CRI_CONFIG_FILE")


def timed_run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and the child's CPU seconds (user and system) of one run, its output discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):  # 1: a finding (check, gc plan), not a failure to run
        raise subprocess.CalledProcessError(proc.returncode, argv)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def floor_commands(daemon: object, tmp: Path) -> dict[str, list[str]]:
    """The daemon's two listings from its own minimal clients."""
    address = getattr(daemon, "address")
    config = tmp / "crictl.yaml"
    config.write_text("")  # crictl reads no /etc/crictl.yaml then
    crictl = str(gobuild.binary(engines.CRICTL))
    endpoint = f"unix://{address}"
    return {
        "floor: ctr images ls -q (Images.List)": [str(getattr(daemon, "bin_dir") / "ctr"), "-a", address, "-n", "k8s.io",
                                                  "images", "ls", "-q"],
        "floor: crictl images -q (the CRI's ListImages)": [crictl, "--config", str(config), "--runtime-endpoint",
                                                           endpoint, "--image-endpoint", endpoint, "images", "-q"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--engine", default=ENGINE, help=f"the containerd of tests/harness/engines.py (default {ENGINE})")
    parser.add_argument("--pinctl-src", help="also run check and gc plan of this src/ directory (an older tree) in "
                                             "each round, as bench_floor's option does")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-") as tmp, \
            containerd_with_images(args.images, engine=args.engine) as daemon:
        env = {**os.environ, **env_for(daemon, write_policy(Path(tmp) / "one.toml", 1))}
        tools_env = {key: value for key, value in env.items() if key not in CRI_ENV}
        timed_run([PINCTL, *COMMANDS["ls"]], env)  # the target cache, as after a node's first run
        runs = {name: ([PINCTL, *argv], env) for name, argv in COMMANDS.items()}
        if args.pinctl_src:
            compileall.compile_dir(args.pinctl_src, quiet=1)  # as bench.common does for this tree
            older = {**env, "PYTHONPATH": args.pinctl_src}
            runs.update({f"{name}, {args.pinctl_src}": ([PINCTL, *COMMANDS[name]], older) for name in ("check", "gc plan")})
        runs.update({name: (argv, tools_env) for name, argv in floor_commands(daemon, Path(tmp)).items()})
        for argv, run_env in runs.values():
            timed_run(argv, run_env)  # each warmed once
        walls: dict[str, list[float]] = {name: [] for name in runs}
        cpus: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, (argv, run_env) in runs.items():
                wall, cpu = timed_run(argv, run_env)
                walls[name].append(wall)
                cpus[name].append(cpu)
            progress(f"round {len(walls['ls -q'])} of {args.rounds} done")
    medians = {name: statistics.median(found) for name, found in walls.items()}
    quiet = medians["ls -q"]
    print(f"| command, {args.engine}, {args.images} images, 2 records, tmpfs, {args.rounds} rounds "
          "| median | beside ls -q | client cpu | goal | met |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, median in medians.items():
        ratio = median / quiet
        goal = name.startswith(("check", "gc plan"))
        judged = f"| <= {GOAL:g}x | {'yes' if ratio <= GOAL else 'no'} |" if goal else "| - | - |"
        cpu = statistics.median(cpus[name])
        print(f"| {name} | {median * 1000:.0f} ms | {ratio:.2f} | {cpu * 1000:.0f} ms {judged}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

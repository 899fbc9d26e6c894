"""Issue 4 and 53 benchmark: `pinctl ls` of 1,000 Docker images beside `docker images`, in both image stores.

Run from the repository root, as root:
    .venv/bin/python -m bench.bench_docker [--images 1000] [--repeat 5] [--store both|classic|containerd]
                                           [--beside-src DIR]

Each store gets a private dockerd (the containerd store on a containerd 1.7 of its own) loaded
with the images; the commands then run in turns, one of each per round, `--repeat` rounds after a
warm-up, and each figure is the median. The first table is wall time, pinctl beside docker images.

With the classic store the run also times, in the same rounds, what bounds ls from below:
- `dockerd /images/json, asked from here`: this process asking dockerd's socket for the image list
  ls reads (one HTTP exchange and its JSON decoded, no process started): the daemon's own floor,
  which docker images pays too. Its CPU figure is this process's.
- `python, click imported`: this Python loading click and doing nothing more, and `pinctl --help`:
  pinctl's cli loaded, no engine asked. No pinctl command can end sooner than these.
`--beside-src DIR` adds, in the same rounds, `pinctl ls` run from another tree's src/ (a
`git worktree add` or `git archive` of an older commit): a change's effect on one load.
The second table is the CPU time (user and system) each command used, from the kernel: on a busy
machine it moves far less than wall time, and it shows where a floor is the interpreter's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, Union

from bench.common import PINCTL, Row, progress, ratio_row, report
from tests.harness import images
from tests.harness.containerd import ContainerdDaemon
from tests.harness.docker import DockerDaemon, load_images_docker

FLOOR_IMPORTS = "import click"
PEER = "docker images"

# A program to run (argv, environment), or work done in this process that returns its wall and CPU seconds.
Command = Union[tuple[Sequence[str], dict[str, str]], Callable[[], tuple[float, float]]]


@contextlib.contextmanager
def dockerd(tmp: Path, containerd_store: bool, count: int) -> Iterator[tuple[DockerDaemon, ContainerdDaemon | None]]:
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(dir=shm) as data:
        ctd = ContainerdDaemon("containerd-1.7", tmp / "ctd", data_dir=Path(data) / "ctd").start() if containerd_store else None
        docker = DockerDaemon(tmp / "dkr", containerd_store=containerd_store, containerd=ctd, data_dir=Path(data) / "dkr")
        try:
            docker.start()
            load_images_docker(docker, tmp / "archives", images.numbered_recipes(count, prefix="example.test/dk"))
            yield docker, ctd
        finally:
            docker.stop()
            if ctd is not None:
                ctd.stop()


def run_timed(argv: Sequence[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user and system, the kernel's rusage of the child) of one run."""
    start = time.perf_counter()
    proc = subprocess.Popen(list(argv), env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, list(argv))
    return wall, usage.ru_utime + usage.ru_stime


def asked_here(host: str) -> Callable[[], tuple[float, float]]:
    """dockerd's image list asked for from this process: wall and CPU seconds of the exchange."""
    import json

    from pinctl.backends.docker import _Wire

    wire = _Wire.to(host, 60.0)

    def ask() -> tuple[float, float]:
        start, cpu = time.perf_counter(), time.process_time()
        status, body = wire.exchange("GET", "/images/json")
        if status != 200 or not isinstance(json.loads(body), list):
            raise RuntimeError(f"dockerd answered /images/json with {status}")
        return time.perf_counter() - start, time.process_time() - cpu

    return ask


def _once(command: Command) -> tuple[float, float]:
    return command() if callable(command) else run_timed(*command)


def in_turns(commands: dict[str, Command], repeat: int) -> dict[str, tuple[float, float]]:
    """Median wall and CPU seconds of each command, run one after another in `repeat` rounds
    after one warm-up round: a load that drifts falls on all of them alike."""
    for command in commands.values():
        _once(command)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(repeat):
        for name, command in commands.items():
            runs[name].append(_once(command))
    return {name: (statistics.median(w for w, _ in got), statistics.median(c for _, c in got)) for name, got in runs.items()}


def bench_store(containerd_store: bool, count: int, repeat: int,
                beside_src: Optional[str] = None) -> tuple[list[Row], list[tuple[str, float, float]]]:
    name = "containerd store" if containerd_store else "classic store"
    progress(f"dockerd, {name}: loading {count} images")
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-") as tmp, dockerd(Path(tmp), containerd_store, count) as (docker, ctd):
        # Classic: no containerd socket is named, as on a plain Docker node; pinctl then reads Docker alone.
        env = {"DOCKER_HOST": docker.host, **({"CONTAINERD_ADDRESS": ctd.address} if ctd else {})}
        commands: dict[str, Command] = {
            "pinctl ls": ([PINCTL, "ls", "-n", "moby"] if ctd else [PINCTL, "ls"], env),
            PEER: ([str(docker.cli_path), "-H", docker.host, "images"], {"DOCKER_CONFIG": str(docker.cli_config_dir)}),
        }
        if beside_src:
            ls_argv = commands["pinctl ls"][0]  # type: ignore[index]
            commands[f"pinctl ls of {beside_src}"] = (ls_argv, {**env, "PYTHONPATH": beside_src})
        if not containerd_store:
            commands["dockerd /images/json, asked from here"] = asked_here(docker.host)
            commands["python, click imported"] = ([sys.executable, "-c", FLOOR_IMPORTS], {})
            commands["pinctl --help"] = ([PINCTL, "--help"], {})
        progress(f"dockerd, {name}: {repeat} rounds of {', '.join(commands)}")
        figures = in_turns(commands, repeat)
    peer_wall, peer_cpu = figures[PEER]
    rows = [ratio_row(f"ls, {count} Docker images, {name}", figures["pinctl ls"][0], PEER, peer_wall, 1.0)]
    rows += [ratio_row(f"{'' if what.startswith('pinctl ls') else 'floor, '}{name}: {what}", wall, PEER, peer_wall, 1.0)
             for what, (wall, _) in figures.items() if what not in ("pinctl ls", PEER)]
    cpu = [(f"{what}, {name}", used, peer_cpu) for what, (_, used) in figures.items() if what != PEER]
    return rows, cpu


def cpu_report(lines: list[tuple[str, float, float]]) -> str:
    table = ["| command, store | CPU | docker images' CPU | ratio |", "| --- | --- | --- | --- |"]
    table += [f"| {what} | {used * 1000:.0f} ms | {peer * 1000:.0f} ms | {used / peer if peer else float('inf'):.2f} |"
              for what, used, peer in lines]
    return "\n".join(table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--store", choices=("both", "classic", "containerd"), default="both")
    parser.add_argument("--beside-src", metavar="DIR", help="also time the pinctl of this src/ directory, in the same rounds")
    opts = parser.parse_args()
    if opts.beside_src:
        import compileall

        compileall.compile_dir(opts.beside_src, quiet=1)  # as bench.common does for this tree
    stores = {"both": (True, False), "classic": (False,), "containerd": (True,)}[opts.store]
    rows: list[Row] = []
    cpu: list[tuple[str, float, float]] = []
    for containerd_store in stores:
        more_rows, more_cpu = bench_store(containerd_store, opts.images, opts.repeat, opts.beside_src)
        rows += more_rows
        cpu += more_cpu
    print(report(rows))
    print()
    print(cpu_report(cpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())

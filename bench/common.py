"""Shared pieces of the benchmarks: a private containerd full of images, and timing."""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from tests.harness import images
from tests.harness.containerd import ContainerdDaemon

REPO = Path(__file__).resolve().parent.parent
PINCTL = str(Path(sys.executable).parent / "pinctl")


def _compiled_as_installed() -> None:
    """pinctl runs from src/ (an editable install): with PYTHONDONTWRITEBYTECODE set, or its
    bytecode stale after an edit, every timed run would compile the changed modules again, which
    an installed pinctl never does. Compile once here, and let the runs keep what they write."""
    import compileall

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    compileall.compile_dir(str(REPO / "src"), quiet=1)


_compiled_as_installed()


ENGINE = "containerd-1.7"  # what the benchmarks measure unless told (--engine)
IMPORT_CHUNK = 2000


def progress(message: str) -> None:
    """A line on stderr with the time: a 10,000-image setup takes minutes."""
    print(f"{time.strftime('%H:%M:%S')} bench: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def containerd_with_images(count: int, namespace: str = "k8s.io", on_disk: bool = False,
                           engine: str = ENGINE) -> Iterator[ContainerdDaemon]:
    """containerd (1.7 unless `engine` names another of tests/harness/engines.py) with `count`
    distinct single-platform images in `namespace`; its root on tmpfs, or with `on_disk` under
    /var/tmp (an operator's node keeps it on disk)."""
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    where = "/var/tmp" if on_disk else shm
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-") as tmp, tempfile.TemporaryDirectory(dir=where) as data:
        # The daemon's data on tmpfs makes importing 1,000 images take seconds, not tens.
        started = time.monotonic()
        daemon = ContainerdDaemon(engine, Path(tmp) / "ctd", data_dir=Path(data)).start()
        progress(f"{engine} started ({daemon.version or 'version not read'}); importing {count} images")
        try:
            recipes = images.numbered_recipes(count)
            # ctr 2.x imports through the transfer service, which refuses an index of 10,000
            # descriptors ("too many descriptors (limit 10000)", three or four per image): archives of 2,000 at most.
            for first in range(0, count, IMPORT_CHUNK):
                archive = Path(tmp) / "images.tar"
                images.build_archive(archive, recipes[first:first + IMPORT_CHUNK])
                images.import_images(daemon, archive, namespace)
                archive.unlink()
                done = min(count, first + IMPORT_CHUNK)
                progress(f"{done} of {count} images in {namespace} after {time.monotonic() - started:.0f} s")
            yield daemon
        finally:
            daemon.stop()


def timed(work: Callable[[], object]) -> float:
    """Seconds one call of work takes, in this process."""
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def run_once(argv: Sequence[str], env: Optional[dict[str, str]] = None, shell: bool = False) -> float:
    start = time.perf_counter()
    subprocess.run(
        argv if not shell else argv[0], shell=shell, check=True, env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


# GNU time (Debian's `time`, which scripts/bootstrap --test installs) starts each measured run.
GNU_TIME = "/usr/bin/time"


def run_measured(argv: Sequence[str], env: Optional[dict[str, str]] = None) -> tuple[float, int]:
    """Seconds and peak resident memory (bytes) of one run of argv. The peak is GNU time's %M, the
    ru_maxrss of a child time forks: the ru_maxrss of a child forked here also counts, until its
    exec, the pages of this process (the benchmark, 100 MiB once it has built 10,000 images),
    which is how `python -c pass` measured 220 MiB beside a parent of 200. time is a few hundred
    KiB, below anything it measures."""
    if not os.access(GNU_TIME, os.X_OK):
        raise SystemExit(f"bench: {GNU_TIME} is missing: install Debian's time package (scripts/bootstrap --test does)")
    with tempfile.NamedTemporaryFile(prefix="pinctl-bench-peak-") as peak:
        start = time.perf_counter()
        proc = subprocess.run([GNU_TIME, "-f", "%M", "-o", peak.name, *argv], env={**os.environ, **(env or {})},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        elapsed = time.perf_counter() - start
        if proc.returncode not in (0, 1):  # 1: a finding (check, gc plan), not a failure to run
            raise subprocess.CalledProcessError(proc.returncode, list(argv))
        # A non-zero exit puts a line before the figure: the figure is the last word.
        return elapsed, int(Path(peak.name).read_text().split()[-1]) * 1024


def median_measured(argv: Sequence[str], repeat: int, env: Optional[dict[str, str]] = None) -> tuple[float, int]:
    """Median seconds and the highest peak memory over `repeat` runs after one warm-up."""
    run_measured(argv, env)
    runs = [run_measured(argv, env) for _ in range(repeat)]
    return statistics.median(t for t, _ in runs), max(m for _, m in runs)


def median_time(argv: Sequence[str], repeat: int, env: Optional[dict[str, str]] = None, shell: bool = False) -> float:
    run_once(argv, env, shell)  # warm the page cache and the daemon
    return statistics.median(run_once(argv, env, shell) for _ in range(repeat))


Row = tuple[str, float, str, float, str, bool]


def ratio_row(name: str, ours: float, peer: str, peer_time: float, goal: float) -> Row:
    """A benchmark judged by ours / peer <= goal."""
    return (name, ours, peer, peer_time, f"<= {goal:g}x", ours <= goal * peer_time)


def overhead_row(name: str, ours: float, peer: str, peer_time: float, budget: float) -> Row:
    """A benchmark judged by ours - peer <= budget seconds."""
    return (name, ours, peer, peer_time, f"within {budget * 1000:.0f} ms", ours - peer_time <= budget)


def report(rows: list[Row]) -> str:
    """A markdown table: what ran, both times, the ratio, the goal and whether it was met."""
    lines = ["| benchmark | pinctl | peer | peer time | ratio | goal | met |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, ours, peer, peer_time, goal, met in rows:
        ratio = ours / peer_time if peer_time else float("inf")
        lines.append(
            f"| {name} | {ours * 1000:.0f} ms | {peer} | {peer_time * 1000:.0f} ms | {ratio:.3f} | {goal} | {'yes' if met else 'no'} |"
        )
    return "\n".join(lines)

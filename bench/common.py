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
from typing import Iterator, Optional, Sequence

from tests.harness import images
from tests.harness.containerd import ContainerdDaemon

REPO = Path(__file__).resolve().parent.parent
PINCTL = str(Path(sys.executable).parent / "pinctl")


@contextlib.contextmanager
def containerd_with_images(count: int, namespace: str = "k8s.io") -> Iterator[ContainerdDaemon]:
    """containerd 1.7 with `count` distinct single-platform images in `namespace`."""
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-") as tmp:
        daemon = ContainerdDaemon("containerd-1.7", Path(tmp) / "ctd").start()
        try:
            archive = Path(tmp) / "images.tar"
            images.build_archive(archive, images.numbered_recipes(count))
            images.import_images(daemon, archive, namespace)
            yield daemon
        finally:
            daemon.stop()


def run_once(argv: Sequence[str], env: Optional[dict[str, str]] = None, shell: bool = False) -> float:
    start = time.perf_counter()
    subprocess.run(
        argv if not shell else argv[0], shell=shell, check=True, env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def median_time(argv: Sequence[str], repeat: int, env: Optional[dict[str, str]] = None, shell: bool = False) -> float:
    run_once(argv, env, shell)  # warm the page cache and the daemon
    return statistics.median(run_once(argv, env, shell) for _ in range(repeat))


def report(rows: list[tuple[str, float, str, float, float, str]]) -> str:
    """A markdown table: benchmark, ours, peer, ratio, goal and verdict."""
    lines = ["| benchmark | pinctl | peer | peer time | ratio | goal | met |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, ours, peer, peer_time, goal, goal_text in rows:
        ratio = ours / peer_time if peer_time else float("inf")
        met = "yes" if ratio <= goal else "no"
        lines.append(f"| {name} | {ours * 1000:.0f} ms | {peer} | {peer_time * 1000:.0f} ms | {ratio:.3f} | {goal_text} | {met} |")
    return "\n".join(lines)

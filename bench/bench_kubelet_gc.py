"""Issue 21 benchmark: `pinctl gc plan` beside the kubelet's own image GC pass, on one node.

Run from the repository root, as root:  .venv/bin/python -m bench.bench_kubelet_gc [--images 1000 --containers 100]

A pod-capable containerd 1.7 whose root is on a loop-mounted ext4 (tests/harness/kubelet.py),
``--images`` images in all: one runnable image per container, plain images for the rest and the
sandbox image; a real kubelet v1.37.2 (built by the test harness) runs the containers as static
pods of ten containers each. Then:

* ``pinctl gc plan -r`` the kubelet's socket with its config file, median of ``--repeat`` runs;
* the kubelet's own pass over the same node: the imagefs is filled below ``evictionHard``, so
  its eviction manager calls ``DeleteUnusedImages`` every 10 s; with ``imageMinimumGCAge`` 1h
  it deletes nothing, and its log (level 5) times each pass from ``Attempting to delete unused
  images`` to the walk's last line: detection (ListImages, the pods, one ContainerStatus per
  container), the order and the walk. Median over ``--repeat`` passes.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

from bench.common import PINCTL, median_time
from tests.harness import cri_pods, images, kubelet, kubernetes_build, pods, runnable
from tests.harness.kubelet_periodic import fill

FS_BYTES = 1024 * 1024 * 1024
PER_POD = 10
EVICTION_AVAILABLE = "200Mi"
PASS_START = re.compile(r'"Attempting to delete unused images"')
WALK_LINE = re.compile(r'"Image ID\'s age is less than the policy\'s minAge|"Image ID was used too recently')


class Pod(kubelet.StaticPod):
    """A static pod of several sleeping containers, one image each."""

    def __init__(self, name: str, refs: list[str]) -> None:
        super().__init__(name, refs[0])
        self.refs = refs

    def manifest(self) -> dict[str, object]:
        doc = super().manifest()
        spec = doc["spec"]
        assert isinstance(spec, dict)
        template = spec["containers"][0]
        spec["containers"] = [{**template, "name": f"c{index}", "image": ref} for index, ref in enumerate(self.refs)]
        return doc


@contextlib.contextmanager
def node(image_count: int, container_count: int) -> Iterator[tuple[pods.PodsDaemon, kubelet.LoopFs, kubelet.Kubelet]]:
    build = kubernetes_build.ensure_kubelet()
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-") as tmp, \
            kubelet.node_daemon(Path(tmp), FS_BYTES) as (daemon, fs):
        work = Path(tmp) / "work"
        used = runnable.load_runnable(daemon, work, [runnable.runnable_recipe(f"example.test/bench-used-{i}:1")
                                                 for i in range(container_count)])
        images.load_images(daemon, work, images.numbered_recipes(image_count - container_count - 1))
        made = kubelet.Kubelet(Path(tmp) / "kubelet", daemon.address, binary=build.binary,
                               gc=kubelet.GcPolicy(85, 80, min_age="1h"),
                               eviction_hard={"imagefs.available": EVICTION_AVAILABLE})
        refs = [info.refs[0] for info in used]
        for start in range(0, len(refs), PER_POD):
            made.add_static_pod(Pod(f"bench-{start // PER_POD}", refs[start:start + PER_POD]))
        made.start()
        try:
            wait_running(daemon.address, container_count)
            yield daemon, fs, made
        finally:
            made.stop()


def wait_running(address: str, count: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while sum(c.state == "running" for c in cri_pods.list_containers(address)) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {count} containers running after {timeout}s")
        time.sleep(1)


def kubelet_passes(made: kubelet.Kubelet, fs: kubelet.LoopFs, count: int) -> list[tuple[float, int]]:
    """Seconds each DeleteUnusedImages pass took, as its log times it, and how many images its
    walk looked at, for ``count`` passes."""
    since = len(made.log_text())
    fill(fs.path / "filler", fs.available - 100 * 1024 * 1024)
    deadline = time.monotonic() + 20 * (count + 2)
    while len(PASS_START.findall(made.log_text(), since)) < count + 1:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {count} eviction passes\n{made.log_tail()}")
        time.sleep(1)
    text = made.log_text()
    starts = [match for match in PASS_START.finditer(text, since)]
    spans = []
    for first, following in zip(starts, starts[1:]):
        walk = [match for match in WALK_LINE.finditer(text, first.end(), following.start())]
        if walk:
            seconds = (made.line_time(walk[-1]) - made.line_time(first)) / datetime.timedelta(seconds=1)
            spans.append((seconds, len(walk)))
    (fs.path / "filler").unlink()
    return spans[:count]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--containers", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    with node(opts.images, opts.containers) as (daemon, fs, made):
        listed = daemon.ctr("images", "ls", "-q").stdout.split()
        print(f"k8s.io: {len(listed)} references; containers running: {opts.containers}", file=sys.stderr)
        env = {"CONTAINERD_ADDRESS": daemon.address, "PINCTL_CONTAINERD_CONFIG": str(daemon.config_path)}
        plan = [PINCTL, "gc", "plan", "-r", f"unix://{daemon.address}", "--kubelet-config", str(made.config_path)]
        table = median_time(plan, opts.repeat, env)
        as_json = median_time([*plan, "-o", "json"], opts.repeat, env)
        passes = kubelet_passes(made, fs, opts.repeat)
        floor = median_time([PINCTL, "--version"], opts.repeat)
    what = f"{opts.images} images, {opts.containers} containers"
    print("| what | time |\n| --- | --- |")
    print(f"| pinctl gc plan, {what} | {table * 1000:.0f} ms |")
    print(f"| pinctl gc plan -o json, {what} | {as_json * 1000:.0f} ms |")
    print(f"| pinctl --version (the interpreter and imports: the floor of any pinctl command) | {floor * 1000:.0f} ms |")
    walked = sorted({count for _, count in passes})
    print(f"| kubelet v1.37.2 DeleteUnusedImages pass (detect, order, walk of {'/'.join(map(str, walked))} images; "
          f"-v=5), {what} | {statistics.median(s for s, _ in passes) * 1000:.0f} ms "
          f"(passes: {', '.join(f'{s * 1000:.0f}' for s, _ in passes)}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 4 benchmark: `pinctl ls` of 1,000 Docker images beside `docker images`, in both image stores.

Run from the repository root, as root:  .venv/bin/python -m bench.bench_docker [--images 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from bench.common import PINCTL, Row, median_time, ratio_row, report
from tests.harness import images
from tests.harness.containerd import ContainerdDaemon
from tests.harness.docker import DockerDaemon, load_images_docker


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


def bench_store(containerd_store: bool, count: int, repeat: int) -> Row:
    name = "containerd store" if containerd_store else "classic store"
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-") as tmp, dockerd(Path(tmp), containerd_store, count) as (docker, ctd):
        # Classic: no containerd socket is named, as on a plain Docker node; pinctl then reads Docker alone.
        env = {"DOCKER_HOST": docker.host, **({"CONTAINERD_ADDRESS": ctd.address} if ctd else {})}
        ours = median_time([PINCTL, "ls", "-n", "moby"] if ctd else [PINCTL, "ls"], repeat, env)
        peer = median_time([str(docker.cli_path), "-H", docker.host, "images"], repeat,
                           {"DOCKER_CONFIG": str(docker.cli_config_dir)})
    return ratio_row(f"ls, {count} Docker images, {name}", ours, "docker images", peer, 1.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    print(report([bench_store(True, opts.images, opts.repeat), bench_store(False, opts.images, opts.repeat)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 5 benchmark: `pinctl check` with 1,000 images beside `ctr images ls` plus one CRI ListImages.

Run from the repository root, as root:  .venv/bin/python -m bench.bench_check [--images 1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import PINCTL, containerd_with_images, median_time, report, run_once
from tests.harness import cri


def peer_once(ctr: list[str], address: str) -> float:
    start = time.perf_counter()
    run_once([*ctr, "images", "ls"])
    cri.list_images(address)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    with containerd_with_images(opts.images) as daemon, tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.toml"
        config.write_text('pinned_images = ["example.test/bench-1*"]\n')
        env = {"CONTAINERD_ADDRESS": daemon.address, "CONTAINER_RUNTIME_ENDPOINT": f"unix://{daemon.address}",
               "PINCTL_CONFIG": str(config)}
        run_once([PINCTL, "sync", "-q"], env)
        cri.wait_for(daemon.address, lambda imgs: sum(i.pinned for i in imgs) >= 111, 30)
        ours = median_time([PINCTL, "check"], opts.repeat, env)
        ctr = [str(daemon.bin_dir / "ctr"), "-a", daemon.address, "-n", "k8s.io"]
        peer_once(ctr, daemon.address)
        peer = statistics.median(peer_once(ctr, daemon.address) for _ in range(opts.repeat))
    met = ours < 1.0
    print(report([(f"check, {opts.images} images", ours, "ctr images ls + one CRI ListImages", peer, "< 1 s wall", met)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

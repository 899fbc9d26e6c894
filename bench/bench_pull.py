"""Issue 14 benchmark: `pinctl pull` of 20 images of a few MB from a loopback registry, beside a
sequential loop of `ctr -n k8s.io images pull` of the same images.

Run from the repository root, as root:  .venv/bin/python -m bench.bench_pull [--images 20] [--mib 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench.common import PINCTL, ratio_row, report, run_once
from tests.harness import images
from tests.harness import registry as reg


def fresh_daemon(tmp: Path, name: str, registry: reg.Registry) -> reg.RegistryContainerd:
    """A containerd of its own for each side: no blob one pulled is there for the other."""
    shm = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else tmp
    data = Path(tempfile.mkdtemp(prefix=f"pinctl-bench-{name}-", dir=shm))
    daemon = reg.RegistryContainerd("containerd-1.7", tmp / name, data_dir=data)
    daemon.add_host(registry.host)
    daemon.start()
    images.ensure_sandbox_image(daemon)
    return daemon


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--mib", type=int, default=3)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-") as name:
        tmp = Path(name)
        registry = reg.Registry(tmp / "registry").start()
        refs = [f"{registry.host}/bench/pull-{n}:1" for n in range(opts.images)]
        for ref in refs:
            registry.push(tmp / "push", images.recipe(ref, seed=ref, layer_bytes=opts.mib * 1024 * 1024,
                                                      compress=False))
        peer_daemon = fresh_daemon(tmp, "ctr", registry)
        try:
            ctr = [str(peer_daemon.bin_dir / "ctr"), "-a", peer_daemon.address, "-n", "k8s.io", "images", "pull",
                   "--hosts-dir", str(peer_daemon.certs_dir), "--snapshotter", "native"]
            peer = run_once([f"for ref in {' '.join(refs)}; do {' '.join(ctr)} \"$ref\" >/dev/null; done"], shell=True)
        finally:
            peer_daemon.stop()
            shutil.rmtree(peer_daemon.data_dir, ignore_errors=True)
        daemon = fresh_daemon(tmp, "pinctl", registry)
        try:
            env = {"CONTAINERD_ADDRESS": daemon.address}
            ours = run_once([PINCTL, "pull", "-r", daemon.address, "-n", "k8s.io", "--max-usage", "100", *refs], env)
            present = set(daemon.ctr("images", "ls", "-q").stdout.split())
            assert set(refs) <= present, "pinctl pull left images out"
        finally:
            daemon.stop()
            shutil.rmtree(daemon.data_dir, ignore_errors=True)
            registry.stop()
    print(report([ratio_row(f"pull {len(refs)} images of {opts.mib} MiB", ours, "ctr images pull loop", peer, 1.0)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

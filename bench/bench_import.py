"""Issue 25 benchmark: `pinctl import` of a 1 GiB archive (an OCI layout with one uncompressed
layer) beside `ctr -n k8s.io images import` of the same file, each into a containerd 1.7 of its
own (data on tmpfs), both unpacking for the native snapshotter; and pinctl's peak memory. With
--small N, an archive of N small images as well (three blobs and a snapshot each): the cost per
blob and per image (pinctl holds each in its lease before it looks it up), where the big archive
measures the bytes.

Run from the repository root, as root:
  .venv/bin/python -m bench.bench_import [--mib 1024] [--small 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench.common import PINCTL, ratio_row, report, run_measured
from tests.harness import archives, images
from tests.harness.containerd import ContainerdDaemon


def fresh_daemon(tmp: Path, name: str) -> ContainerdDaemon:
    shm = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else tmp
    data = Path(tempfile.mkdtemp(prefix=f"pinctl-bench-{name}-", dir=shm))
    daemon = ContainerdDaemon("containerd-1.7", tmp / name, data_dir=data).start()
    images.ensure_sandbox_image(daemon)
    return daemon


def side(tmp: Path, name: str, archive: Path, refs: list[str], repeat: int) -> tuple[float, int]:
    """Median seconds of `repeat` imports into an emptied daemon (blobs and snapshots gone), and
    the largest peak resident size (bytes) of the importing process seen."""
    daemon = fresh_daemon(tmp, name)
    try:
        if name == "ctr":
            argv = [str(daemon.bin_dir / "ctr"), "-a", daemon.address, "-n", "k8s.io", "images", "import",
                    "--snapshotter", "native", str(archive)]
        else:
            argv = [PINCTL, "import", "-r", daemon.address, "--max-usage", "100", "--snapshotter", "native",
                    str(archive)]
        env = {"CONTAINERD_ADDRESS": daemon.address, "PINCTL_CONTAINERD_CONFIG": str(daemon.config_path)}
        times, peaks = [], []
        for _ in range(repeat):
            daemon.ctr("images", "rm", "--sync", *refs, check=False)
            daemon.ctr("images", "rm", "--sync", *[line for line in daemon.ctr("images", "ls", "-q").stdout.split()
                                                  if line.startswith("sha256:") and line not in refs], check=False)
            images.ensure_sandbox_image(daemon)
            seconds, peak = run_measured(argv, env)
            times.append(seconds)
            peaks.append(peak)
            listed = set(daemon.ctr("images", "ls", "-q").stdout.split())
            assert listed >= set(refs), f"{name} left {len(set(refs) - listed)} of {len(refs)} images out"
        return statistics.median(times), max(peaks)
    finally:
        daemon.stop()
        shutil.rmtree(daemon.data_dir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--small", type=int, default=0, metavar="N", help="also an archive of N small images")
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    ref = "example.test/bench/import:1"
    rows, peaks = [], []
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-") as name:
        tmp = Path(name)
        archive = tmp / "big.tar"
        archives.big_archive(archive, ref, opts.mib * 1024 * 1024)
        archive_sides = [(f"import a {opts.mib} MiB archive", archive, [ref])]
        if opts.small:
            small = tmp / "small.tar"
            built = archives.oci_archive(small, [images.recipe(f"example.test/bench/small-{n}:1", seed=f"s{n}")
                                                 for n in range(opts.small)])
            archive_sides.append((f"import {opts.small} small images", small, [i.refs[0] for i in built]))
        for label, path, refs in archive_sides:
            peer, peer_peak = side(tmp, "ctr", path, refs, opts.repeat)
            ours, peak = side(tmp, "pinctl", path, refs, opts.repeat)
            rows.append(ratio_row(label, ours, "ctr images import", peer, 1.5))
            peaks.append(f"{label}: pinctl import {peak // 2**20} MiB, ctr images import {peer_peak // 2**20} MiB")
    print(report(rows))
    print("\npeak resident memory:\n" + "\n".join(peaks))
    return 0


if __name__ == "__main__":
    sys.exit(main())

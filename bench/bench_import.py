"""Issue 25 benchmark: `pinctl import` of a 1 GiB archive (an OCI layout with one uncompressed
layer) beside `ctr -n k8s.io images import` of the same file, each into a containerd 1.7 of its
own (data on tmpfs), both unpacking for the native snapshotter; and pinctl's peak memory.

Run from the repository root, as root:  .venv/bin/python -m bench.bench_import [--mib 1024] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import PINCTL, ratio_row, report
from tests.harness import archives, images
from tests.harness.containerd import ContainerdDaemon


def fresh_daemon(tmp: Path, name: str) -> ContainerdDaemon:
    shm = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else tmp
    data = Path(tempfile.mkdtemp(prefix=f"pinctl-bench-{name}-", dir=shm))
    daemon = ContainerdDaemon("containerd-1.7", tmp / name, data_dir=data).start()
    images.ensure_sandbox_image(daemon)
    return daemon


# Runs the importer as its only child: the peak printed is the importer's, or this small wrapper's
# (about 9 MiB, which a child counts until its exec) if that is higher.
MEASURE = ("import resource, subprocess, sys\n"
           "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Seconds the import took (the wrapper's start-up is some ms of it, the same for both sides)
    and the importer's peak resident size in KiB."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", MEASURE, *argv], check=True, env={**os.environ, **env},
                          capture_output=True, text=True)
    return time.perf_counter() - start, int(done.stdout.strip())


def side(tmp: Path, name: str, archive: Path, ref: str, repeat: int) -> tuple[float, int]:
    """Median seconds of `repeat` imports into an emptied daemon (blobs and snapshots gone), and
    the largest peak RSS (KiB) of the importing process seen."""
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
            daemon.ctr("images", "rm", "--sync", ref, check=False)
            daemon.ctr("images", "rm", "--sync", *[line for line in daemon.ctr("images", "ls", "-q").stdout.split()
                                                  if line.startswith("sha256:") and line != ref], check=False)
            images.ensure_sandbox_image(daemon)
            seconds, peak = timed(argv, env)
            times.append(seconds)
            peaks.append(peak)
            assert ref in daemon.ctr("images", "ls", "-q").stdout.split(), f"{name} left the image out"
        return statistics.median(times), max(peaks)
    finally:
        daemon.stop()
        shutil.rmtree(daemon.data_dir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    ref = "example.test/bench/import:1"
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-") as name:
        tmp = Path(name)
        archive = tmp / "big.tar"
        archives.big_archive(archive, ref, opts.mib * 1024 * 1024)
        peer, peer_peak = side(tmp, "ctr", archive, ref, opts.repeat)
        ours, peak = side(tmp, "pinctl", archive, ref, opts.repeat)
    print(report([ratio_row(f"import a {opts.mib} MiB archive", ours, "ctr images import", peer, 1.5)]))
    print(f"\npeak resident memory: pinctl import {peak // 1024} MiB, ctr images import {peer_peak // 1024} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

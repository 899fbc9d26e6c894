"""Issue 3 benchmark: `pinctl sync` of 1,000 images beside a shell loop of `ctr images label`.

Run from the repository root, as root:  .venv/bin/python -m bench.bench_sync [--images 1000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bench.bench_core import ctr_argv
from bench.common import PINCTL, containerd_with_images, ratio_row, report, run_once


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    opts = parser.parse_args()
    with containerd_with_images(opts.images) as daemon, tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.toml"
        config.write_text('pinned_images = ["example.test/bench-*"]\n')
        env = {"CONTAINERD_ADDRESS": daemon.address, "PINCTL_CONFIG": str(config)}
        refs = [ref for ref in daemon.ctr("images", "ls", "-q").stdout.split() if ref.startswith("example.test/bench-")]
        ctr = " ".join(ctr_argv(daemon))
        loop = (f'{ctr} images ls -q | grep "^example.test/bench-" | while read -r ref; do '
                f'{ctr} images label "$ref" io.cri-containerd.pinned=pinned >/dev/null; done')
        peer = run_once([loop], shell=True)
        run_once([PINCTL, "unpin", "-n", "k8s.io", "-q", "example.test/bench-*"], env)
        ours = run_once([PINCTL, "sync", "-n", "k8s.io", "-q"], env)
        labelled = sum("io.cri-containerd.pinned=pinned" in line for line in daemon.ctr("images", "ls").stdout.splitlines())
        assert labelled >= len(refs), f"sync labelled {labelled} of {len(refs)}"
    print(report([ratio_row(f"sync {len(refs)} images", ours, "ctr images label loop", peer, 1 / 20)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

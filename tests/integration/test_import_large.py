"""A 1 GiB archive through pinctl import into containerd 1.7, in bounded memory: the process's
peak resident size stays a small fraction of the archive, and the image is whole and unpacked."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable

from tests.harness import archives, cri
from tests.harness.containerd import ContainerdDaemon

GIB = 1024 ** 3
# pinctl's interpreter with grpc and protobuf loaded is about 60 MiB; the stream adds a few MiB.
PEAK_LIMIT_KIB = 200 * 1024
MEASURE = ("import resource, subprocess, sys\n"
           "code = subprocess.run(sys.argv[1:]).returncode\n"
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
           "sys.exit(code)\n")


def test_a_1_gib_archive_streams_in_bounded_memory(containerd17: ContainerdDaemon, tmp_path: pathlib.Path,
                                                   clean_k8s_io: Callable[..., ContainerdDaemon]) -> None:
    daemon = clean_k8s_io(containerd17)
    path = tmp_path / "big.tar"
    info = archives.big_archive(path, "example.test/imp/big:1", GIB)
    assert path.stat().st_size > GIB
    env = {**os.environ, "CONTAINERD_ADDRESS": daemon.address, "PINCTL_CONTAINERD_CONFIG": str(daemon.config_path)}
    try:
        result = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "pinctl", "import", "--pin",
                                 "-r", daemon.address, "--max-usage", "95", str(path), "-o", "json"],
                                capture_output=True, text=True, env=env, timeout=900)
        assert result.returncode == 0, result.stdout + result.stderr
        peak_kib = int(result.stderr.strip().splitlines()[-1])
        assert peak_kib < PEAK_LIMIT_KIB, f"pinctl import peaked at {peak_kib // 1024} MiB for a 1 GiB archive"
        item = json.loads(result.stdout)["imports"][0]
        assert (item["ref"], item["action"], item["pin"]) == (info.refs[0], "imported", "pinned")
        assert item["size"] == path.stat().st_size
        listed = cri.wait_for(daemon.address, lambda found: info.refs[0] in cri.by_tag(found))
        image = cri.by_tag(listed)[info.refs[0]]
        assert image.pinned and image.id == info.image_id and image.size >= GIB
        diff_id = json.loads(daemon.ctr("content", "get", info.config_digest).stdout)["rootfs"]["diff_ids"][0]
        assert diff_id in daemon.ctr("snapshots", "--snapshotter", "native", "ls").stdout
    finally:
        path.unlink(missing_ok=True)
        daemon.clear_images(cri.NAMESPACE)

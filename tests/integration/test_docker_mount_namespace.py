"""A dockerd in a mount namespace of its own (a unit's private mounts): its data root is a
filesystem mounted only there, so the host's directory of that name is another filesystem.
pull's and import's disk budget and gc's figures (prune of Docker's images) read the one
dockerd writes to, through its /proc/PID/root, as they do for a CRI runtime's image
filesystem. Real dockerd 26, classic store, started under unshare with a 64 MiB tmpfs on its
data root."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import pytest

from tests.harness.docker import DockerDaemon

TMPFS_BYTES = 64 * 2**20


class NamespacedDockerd(DockerDaemon):
    """dockerd run by unshare in a private mount namespace whose data root is a tmpfs; unshare
    and sh exec it, so its pid is the one the harness started."""

    def argv(self) -> list[str]:
        mount = 'mount -t tmpfs -o size=64m,mode=0711 none "$1" && shift && exec "$@"'
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, "sh", str(self.data_root),
                *super().argv()]


@pytest.fixture(scope="module")
def private_dockerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NamespacedDockerd]:
    if os.geteuid() != 0:
        pytest.fail("a mount namespace of dockerd's own needs root (CI runs as root)")
    daemon = NamespacedDockerd(tmp_path_factory.mktemp("dockerd-ns"))
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.stop()


def _bytes(path: pathlib.Path) -> int:
    found = os.statvfs(path)
    return found.f_blocks * found.f_frsize


def test_dockers_data_root_is_read_where_dockerd_has_it(private_dockerd: NamespacedDockerd) -> None:
    from pinctl.backends.docker import DockerEngine
    from pinctl.gc.plan import DockerDomain
    from pinctl.landing.runtimes import DockerTarget

    engine = DockerEngine(private_dockerd.host)
    assert engine.root_dir() == str(private_dockerd.data_root)
    assert _bytes(private_dockerd.data_root) != TMPFS_BYTES  # the host's directory: another filesystem
    assert engine.root_dir_here() == f"/proc/{private_dockerd.pid}/root{private_dockerd.data_root}"
    assert DockerTarget(engine).filesystem().capacity_bytes == TMPFS_BYTES
    observed = DockerDomain(engine).observe([])
    assert observed.fs.capacity_bytes == TMPFS_BYTES, observed.fs

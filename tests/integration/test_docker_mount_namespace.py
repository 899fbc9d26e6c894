"""A dockerd in a mount namespace of its own (a unit's private mounts): its data root is a
filesystem mounted only there, so the host's directory of that name is another filesystem.
pull's and import's disk budget and gc's figures (prune of Docker's images) read the one
dockerd writes to, through its /proc/PID/root, as they do for a CRI runtime's image
filesystem. Real dockerd 26, classic store, started under unshare with a 64 MiB tmpfs on its
data root, beside a containerd of its own that has no namespace moby: -n moby names Docker's
images all the same."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.harness import images
from tests.harness.containerd import ContainerdDaemon
from tests.harness.docker import DockerDaemon, load_images_docker
from tests.integration.pinctl_runner import assert_one_line_error, pinctl

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


@pytest.fixture(scope="module")
def bare_containerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerdDaemon]:
    """A containerd with no namespace moby: the classic dockerd above keeps its images itself."""
    daemon = ContainerdDaemon("containerd-1.7", tmp_path_factory.mktemp("ctd-no-moby"))
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


def test_n_moby_names_a_classic_dockers_images_where_containerd_has_no_moby(
        bare_containerd: ContainerdDaemon, private_dockerd: NamespacedDockerd, tmp_path: pathlib.Path) -> None:
    load_images_docker(private_dockerd, tmp_path / "archives", [images.recipe("example.test/ns/app:1", seed="ns")])
    env = {"DOCKER_HOST": private_dockerd.host}
    assert "moby" not in bare_containerd.ctr("namespaces", "ls", "-q").stdout.split()
    listed = pinctl(bare_containerd, "ls", "-n", "moby", "-o", "json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [(row["ref"], row["source"]) for row in json.loads(listed.stdout)["images"]] == [
        ("example.test/ns/app:1", "docker")]
    # Past the kubelet's high threshold on the tmpfs dockerd writes to (the host's directory is
    # nearly empty): prune plans to delete the unused image, as the kubelet would.
    filler = pathlib.Path(f"/proc/{private_dockerd.pid}/root{private_dockerd.data_root}/filler")
    filler.write_bytes(b"\0" * (TMPFS_BYTES * 9 // 10))
    try:
        planned = pinctl(bare_containerd, "prune", "-n", "moby", "--dry-run", "-o", "json", env=env)
    finally:
        filler.unlink()
    assert planned.returncode == 0, planned.stderr
    assert [(item["refs"], item["action"]) for item in json.loads(planned.stdout)["results"]] == [
        (["example.test/ns/app:1"], "would-remove")], planned.stdout
    assert "moby" not in bare_containerd.ctr("namespaces", "ls", "-q").stdout.split()  # nothing created
    # Any other name containerd lacks is refused as before: most likely a typo.
    assert_one_line_error(pinctl(bare_containerd, "ls", "-n", "mobi", env=env), 2, "namespace mobi does not exist")



def test_n_moby_with_docker_down_says_docker_is_not_answering(bare_containerd: ContainerdDaemon) -> None:
    """-n moby with no Docker at its default socket is not a typo: exit 1 naming Docker. pinctl
    runs with an empty /run of its own, so a Docker this machine may run is not there."""
    env = {key: value for key, value in os.environ.items() if key not in ("DOCKER_HOST", "CONTAINERD_NAMESPACE")}
    env["CONTAINERD_ADDRESS"] = bare_containerd.address
    script = 'mount -t tmpfs none /run && exec "$@"'
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                             sys.executable, "-m", "pinctl", "ls", "-n", "moby"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert_one_line_error(result, 1, "Docker is not answering at unix:///var/run/docker.sock",
                          f"containerd at {bare_containerd.address} has no namespace moby", "--docker-host")

"""Smoke tests of the Docker harness: dockerd 26 with the containerd image store
(on the harness's containerd 1.7) and with the classic store."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest

from tests.harness import docker as dk
from tests.harness import images
from tests.harness.containerd import ContainerdDaemon
from tests.harness.docker import DockerDaemon

PIN_KEY = "io.cri-containerd.pinned"
LoadDockerImages = Callable[..., list[images.ImageInfo]]

pytestmark = pytest.mark.integration


def moby(ctd: ContainerdDaemon) -> dict[str, tuple[str, dict[str, str]]]:
    """``ctr -n moby images ls`` as ref -> (digest, labels)."""
    return {row.ref: (row.digest, row.labels) for row in ctd.images(dk.MOBY_NAMESPACE)}


def tags_by_id(daemon: DockerDaemon) -> dict[str, set[str]]:
    result: dict[str, set[str]] = {}
    for row in daemon.images():
        result.setdefault(row["ID"], set()).add(f"{row['Repository']}:{row['Tag']}")
    return result


@pytest.fixture
def store(
    dockerd_containerd_store: DockerDaemon, clean_docker: Callable[[DockerDaemon], DockerDaemon]
) -> DockerDaemon:
    return clean_docker(dockerd_containerd_store)


def test_both_daemons_start(dockerd_containerd_store: DockerDaemon, dockerd_classic: DockerDaemon) -> None:
    for daemon in (dockerd_containerd_store, dockerd_classic):
        assert daemon.is_alive()
        assert daemon.version.startswith("26.1.")
        assert len(daemon.socket) < 100
        assert daemon.host == f"unix://{daemon.socket}"
    assert dockerd_classic.storage_driver == "vfs"
    # overlayfs works here; a sandbox without overlay mounts falls back to native.
    assert dockerd_containerd_store.storage_driver in ("overlayfs", "native")


def test_info_tells_the_image_stores_apart(
    dockerd_containerd_store: DockerDaemon, dockerd_classic: DockerDaemon
) -> None:
    store_info = dockerd_containerd_store.info()
    assert store_info["Driver"] == dockerd_containerd_store.storage_driver
    assert ["driver-type", "io.containerd.snapshotter.v1"] in store_info["DriverStatus"]
    assert dockerd_containerd_store.uses_containerd_store()
    classic_info = dockerd_classic.info()
    assert classic_info["Driver"] == "vfs"
    assert "driver-type" not in dockerd_classic.driver_status()
    assert not dockerd_classic.uses_containerd_store()


def test_loaded_image_with_two_tags(dockerd: DockerDaemon, load_docker_images: LoadDockerImages) -> None:
    recipe = images.recipe("example.test/app:1", "example.test/app:latest", seed="app")
    (info,) = load_docker_images(dockerd, [recipe])
    # Classic ids are config digests (ImageInfo.image_id); containerd-store ids are manifest digests.
    expected = info.digest if dockerd.containerd_store else info.image_id
    assert dk.expected_id(dockerd, info) == expected
    assert tags_by_id(dockerd) == {expected: {"example.test/app:1", "example.test/app:latest"}}
    assert dockerd.inspect("example.test/app:1")["Id"] == expected


def test_containerd_store_images_are_in_moby(
    containerd17: ContainerdDaemon, store: DockerDaemon, load_docker_images: LoadDockerImages
) -> None:
    (info,) = load_docker_images(store, [images.recipe("example.test/app:1", "example.test/app:2", seed="m")])
    # Full refs, as loaded; the target is the manifest itself.
    assert moby(containerd17) == {ref: (info.digest, {}) for ref in info.refs}


def test_multi_platform_needs_the_containerd_store(
    dockerd: DockerDaemon, load_docker_images: LoadDockerImages
) -> None:
    recipe = images.recipe("example.test/multi:1", platforms=("linux/amd64", "linux/arm64"))
    if not dockerd.containerd_store:
        # manifest.json (all the classic loader reads) has no way to describe an index.
        with pytest.raises(ValueError, match="multi-platform"):
            load_docker_images(dockerd, [recipe])
        return
    (info,) = load_docker_images(dockerd, [recipe])
    assert tags_by_id(dockerd) == {info.digest: {"example.test/multi:1"}}


def test_ctr_pin_label_survives_docker_tag_and_rmi(
    containerd17: ContainerdDaemon, store: DockerDaemon, load_docker_images: LoadDockerImages
) -> None:
    (info,) = load_docker_images(store, [images.recipe("example.test/pin:1", "example.test/pin:2", seed="pin")])
    containerd17.label_image("example.test/pin:1", {PIN_KEY: "pinned"}, namespace=dk.MOBY_NAMESPACE)
    assert moby(containerd17)["example.test/pin:1"][1] == {PIN_KEY: "pinned"}
    assert store.inspect("example.test/pin:1")["Id"] == info.digest
    store.docker("tag", "example.test/pin:1", "example.test/pin:3")
    store.docker("image", "rm", "example.test/pin:2")
    after = moby(containerd17)
    assert set(after) == {"example.test/pin:1", "example.test/pin:3"}
    assert after["example.test/pin:1"] == (info.digest, {PIN_KEY: "pinned"})
    # docker tag copies the source image's containerd labels, the pin included.
    assert after["example.test/pin:3"] == (info.digest, {PIN_KEY: "pinned"})
    assert set(store.inspect("example.test/pin:1")["RepoTags"]) == {"example.test/pin:1", "example.test/pin:3"}


def test_retag_over_a_pinned_ref_leaves_a_pinned_dangling_image(
    containerd17: ContainerdDaemon, store: DockerDaemon, load_docker_images: LoadDockerImages
) -> None:
    old, new = load_docker_images(
        store, [images.recipe("example.test/old:1", seed="old"), images.recipe("example.test/new:1", seed="new")]
    )
    containerd17.label_image("example.test/old:1", {PIN_KEY: "pinned"}, namespace=dk.MOBY_NAMESPACE)
    store.docker("tag", "example.test/new:1", "example.test/old:1")
    after = moby(containerd17)
    assert after["example.test/old:1"] == (new.digest, {})
    # dockerd keeps the displaced image under a placeholder name, labels and all.
    assert after[f"moby-dangling@{old.digest}"] == (old.digest, {PIN_KEY: "pinned"})


def test_reload_keeps_ctr_labels(
    containerd17: ContainerdDaemon, store: DockerDaemon, load_docker_images: LoadDockerImages
) -> None:
    load_docker_images(store, [images.recipe("example.test/re:1", seed="v1")])
    containerd17.label_image("example.test/re:1", {PIN_KEY: "pinned"}, namespace=dk.MOBY_NAMESPACE)
    (v2,) = load_docker_images(store, [images.recipe("example.test/re:1", seed="v2")])
    # docker load moves the existing image record to the new target; its labels stay.
    assert moby(containerd17)["example.test/re:1"] == (v2.digest, {PIN_KEY: "pinned"})


def test_clean_docker_empties_docker_and_moby(
    containerd17: ContainerdDaemon, store: DockerDaemon, load_docker_images: LoadDockerImages
) -> None:
    load_docker_images(store, images.numbered_recipes(dk.BULK_REMOVE_OVER + 5, prefix="example.test/many"))
    dk.reset_docker(store)
    assert store.images() == []
    assert moby(containerd17) == {}


def test_stop_is_idempotent_and_takes_the_supervised_containerd(
    dockerd_classic: DockerDaemon, tmp_path: pathlib.Path
) -> None:
    # dockerd_classic only proves the engine is available; this daemon is our own.
    daemon = DockerDaemon(tmp_path / "own").start()
    pid_file = daemon.exec_root / "containerd" / "containerd.pid"
    supervised = int(pid_file.read_text())
    daemon.stop()
    daemon.stop()
    assert not daemon.is_alive()
    assert _gone(supervised)


def _gone(pid: int) -> bool:
    """No such process, or only a zombie awaiting its reaper."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"

"""Smoke tests of the real-engine harness itself, on containerd 1.6 and 1.7."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.harness import cri, images
from tests.harness.containerd import ContainerdDaemon

PIN_KEY = "io.cri-containerd.pinned"
LoadImages = Callable[..., list[images.ImageInfo]]

pytestmark = pytest.mark.integration


def test_session_daemons_report_their_versions(
    containerd17: ContainerdDaemon, containerd16: ContainerdDaemon
) -> None:
    assert containerd17.version.startswith("1.7.")
    assert containerd16.version.startswith("1.6.")
    assert containerd17.is_alive() and containerd16.is_alive()
    assert len(containerd17.address) < 100 and len(containerd16.address) < 100


def test_sandbox_image_is_the_only_image_after_reset(containerd: ContainerdDaemon) -> None:
    listed = cri.list_images(containerd.address)
    assert [image.repo_tags for image in listed] == [(containerd.sandbox_image,)]
    # The CRI adopts the image: a managed label plus a sha256:<image id> ref.
    refs = {row.ref: row for row in containerd.images()}
    assert refs[containerd.sandbox_image].labels["io.cri-containerd.image"] == "managed"
    assert listed[0].id in refs


def test_one_image_with_three_refs(containerd: ContainerdDaemon, load_images: LoadImages) -> None:
    recipe = images.recipe("alpha:1.0", "alpha:latest", "registry.example/acme/alpha:1", seed="alpha")
    (info,) = load_images(containerd, [recipe])
    rows = {row.ref: row for row in containerd.images()}
    assert {ref for ref in rows if "alpha" in ref} == set(info.refs)
    assert {rows[ref].digest for ref in info.refs} == {info.digest}
    listed = cri.by_tag(cri.list_images(containerd.address))
    assert listed[info.refs[0]].repo_tags == tuple(sorted(info.refs))
    assert listed[info.refs[0]].id == info.image_id
    assert listed[info.refs[0]].size == info.size


def test_multi_platform_index(containerd: ContainerdDaemon, load_images: LoadImages) -> None:
    recipe = images.recipe("multi:2.0", platforms=("linux/amd64", "linux/arm64"))
    (info,) = load_images(containerd, [recipe])
    (row,) = [row for row in containerd.images() if row.ref == info.refs[0]]
    assert row.media_type == images.OCI_INDEX
    assert row.digest == info.digest
    assert set(row.platforms) == {"linux/amd64", "linux/arm64"}
    listed = cri.by_tag(cri.list_images(containerd.address))
    assert listed[info.refs[0]].id == info.image_id
    assert listed[info.refs[0]].size == info.size


def test_ctr_label_sets_and_removes_the_pin_label(
    containerd: ContainerdDaemon, load_images: LoadImages
) -> None:
    (info,) = load_images(containerd, [images.recipe("beta:1.0")])
    ref = info.refs[0]
    containerd.label_image(ref, {PIN_KEY: "pinned"})
    assert _labels(containerd, ref)[PIN_KEY] == "pinned"
    if containerd.version.startswith("1.6."):
        # containerd 1.6 predates CRI image pinning: the label is inert there.
        time.sleep(0.3)
        assert not cri.by_tag(cri.list_images(containerd.address))[ref].pinned
    else:
        cri.wait_for(containerd.address, lambda listed: cri.by_tag(listed)[ref].pinned, timeout=30)
    containerd.label_image(ref, {PIN_KEY: ""})
    assert PIN_KEY not in _labels(containerd, ref)
    cri.wait_for(containerd.address, lambda listed: not cri.by_tag(listed)[ref].pinned, timeout=30)


def test_sandbox_image_pinned_by_cri_17_only(containerd: ContainerdDaemon) -> None:
    labels = _labels(containerd, containerd.sandbox_image)
    expected = "pinned" if containerd.version.startswith("1.7.") else None
    assert labels.get(PIN_KEY) == expected


def test_fresh_namespace_is_invisible_to_cri(
    containerd17: ContainerdDaemon,
    clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
    fresh_namespace: Callable[[ContainerdDaemon], str],
    load_images: LoadImages,
) -> None:
    clean_k8s_io(containerd17)
    namespace = fresh_namespace(containerd17)
    (info,) = load_images(containerd17, [images.recipe("gamma:1.0")], namespace)
    assert [row.ref for row in containerd17.images(namespace)] == list(info.refs)
    assert info.refs[0] not in cri.by_tag(cri.list_images(containerd17.address))


def test_restart_keeps_images(
    containerd17: ContainerdDaemon,
    clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
    load_images: LoadImages,
) -> None:
    clean_k8s_io(containerd17)
    (info,) = load_images(containerd17, [images.recipe("delta:1.0")])
    old_pid = containerd17.pid
    containerd17.restart()
    assert containerd17.pid != old_pid
    cri.wait_for_refs(containerd17.address, info.refs)


def test_unpacked_import_is_listed_too(containerd: ContainerdDaemon, load_images: LoadImages) -> None:
    (info,) = load_images(containerd, [images.recipe("epsilon:1.0")], unpack=True)
    assert info.refs[0] in cri.by_tag(cri.list_images(containerd.address))


def test_hundred_images_in_one_archive(containerd: ContainerdDaemon, load_images: LoadImages) -> None:
    infos = load_images(containerd, images.numbered_recipes(100, prefix="many"))
    listed = cri.by_tag(cri.list_images(containerd.address))
    assert all(listed[info.refs[0]].id == info.image_id for info in infos)
    assert len({info.image_id for info in infos}) == 100


def _labels(daemon: ContainerdDaemon, ref: str) -> dict[str, str]:
    (row,) = [row for row in daemon.images() if row.ref == ref]
    return row.labels

"""pinctl import against real containerd 1.7 and 2.1 (k8s.io): archives of both formats made by
the harness, multi-platform indexes, the CRI (tests/harness/cri.py and crictl) showing each
imported image pinned, the layers unpacked for the CRI's snapshotter under the chain IDs ctr's
own unpack uses, content that survives containerd's GC, and every broken archive of the corpus
refused with nothing named or labelled. Results are read back with ctr and the CRI, never
through pinctl."""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.harness import archives, cri, images
from tests.harness.containerd import ContainerdDaemon
from tests.harness.crictl import Crictl, by_tag
from tests.integration.pinctl_runner import pinctl

PIN = "io.cri-containerd.pinned"
HOST = images.host_platform()
OTHER = "linux/s390x" if HOST != "linux/s390x" else "linux/amd64"
EXPECTED: dict[str, str] = json.loads((archives.CORPUS / "EXPECTED.json").read_text())


@pytest.fixture(params=["containerd17", "containerd21", "containerd24"], ids=["ctd17", "ctd21", "ctd24"])
def node(request: pytest.FixtureRequest, clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon]) -> ContainerdDaemon:
    """Each containerd with k8s.io holding only the sandbox image."""
    daemon: ContainerdDaemon = request.getfixturevalue(request.param)
    return clean_k8s_io(daemon)


def run(daemon: ContainerdDaemon, *args: str) -> Any:
    return pinctl(daemon, "import", *args, "-r", daemon.address, "--max-usage", "95")


def imported(daemon: ContainerdDaemon, *args: str, expect: int = 0) -> dict[str, Any]:
    result = run(daemon, *args, "-o", "json")
    assert result.returncode == expect, result.stdout + result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def records(daemon: ContainerdDaemon) -> dict[str, dict[str, str]]:
    return {row.ref: row.labels for row in daemon.images(cri.NAMESPACE)}


def cri_pinned(daemon: ContainerdDaemon, refs: list[str]) -> dict[str, bool]:
    """What the CRI tells the kubelet, once it has caught up with the new records."""
    listed = cri.wait_for(daemon.address, lambda found: set(refs) <= set(cri.by_tag(found)))
    tags = cri.by_tag(listed)
    return {ref: tags[ref].pinned for ref in refs}


def snapshots(daemon: ContainerdDaemon) -> set[str]:
    lines = daemon.ctr("snapshots", "--snapshotter", "native", "ls").stdout.splitlines()[1:]
    return {line.split()[0] for line in lines if line.strip()}


@pytest.mark.parametrize("fmt,compress", [("oci", ""), ("oci", "gzip"), ("docker", ""), ("docker", "zstd")])
def test_import_pin_shows_pinned_to_the_cri_and_unpacks(node: ContainerdDaemon, tmp_path: pathlib.Path,
                                                        fmt: str, compress: str) -> None:
    path = tmp_path / f"{fmt}.tar"
    make = archives.oci_archive if fmt == "oci" else archives.docker_archive
    one, two = make(path, [images.recipe(f"example.test/imp-{fmt}/one:1", seed=f"{fmt}-one{compress}"),
                           images.recipe(f"example.test/imp-{fmt}/two:1", seed=f"{fmt}-two{compress}")], compress)
    document = imported(node, "--pin", str(path))
    # The CRI and the content services are the same socket here: named once, with the snapshotter.
    assert document["runtime"].count(node.address) == 1 and document["runtime"].endswith("(snapshotter native)")
    refs = [*one.refs, *two.refs]
    assert [(i["ref"], i["action"], i["pin"]) for i in document["imports"]] == [
        (ref, "imported", "pinned") for ref in refs]
    assert cri_pinned(node, refs) == {ref: True for ref in refs}
    ids = {image.id for image in cri.list_images(node.address) if set(image.repo_tags) & set(refs)}
    assert ids == {one.image_id, two.image_id}  # the CRI names them by config digest, as ctr's import does
    labels = records(node)
    assert all(labels[ref].get(PIN) == "pinned" for ref in refs)
    # Unpacked for the CRI's snapshotter (native in the harness), one snapshot per chain ID.
    manifests = {json.loads(node.ctr("content", "get", image.config_digest).stdout)["rootfs"]["diff_ids"][0]
                 for image in (one, two)}
    assert manifests <= snapshots(node)
    again = imported(node, "--pin", str(path))
    assert [(i["action"], i["pin"]) for i in again["imports"]] == [("present", "already-pinned")] * 2


def test_without_pin_nothing_is_labelled_and_crictl_agrees(containerd21: ContainerdDaemon, crictl: pathlib.Path,
                                                           clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
                                                           tmp_path: pathlib.Path) -> None:
    daemon = clean_k8s_io(containerd21)
    path = tmp_path / "plain.tar"
    (plain,) = archives.oci_archive(path, [images.recipe("example.test/imp/plain:1", seed="plain21")])
    (pinned,) = archives.oci_archive(tmp_path / "pinned.tar", [images.recipe("example.test/imp/pinned:1",
                                                                             seed="pinned21")])
    imported(daemon, str(path))
    imported(daemon, "--pin", str(tmp_path / "pinned.tar"))
    cri_pinned(daemon, [*plain.refs, *pinned.refs])
    listed = by_tag(Crictl(crictl, daemon.address, tmp_path / "crictl").images())
    assert listed[plain.refs[0]].pinned is False and listed[pinned.refs[0]].pinned is True
    assert listed[pinned.refs[0]].id == pinned.image_id


def test_a_multi_platform_index_imports_the_hosts_platform_or_all(node: ContainerdDaemon, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "multi.tar"
    (info,) = archives.oci_archive(path, [images.recipe("example.test/imp/multi:1", seed="multi",
                                                        platforms=[HOST, OTHER])])
    document = imported(node, "--pin", str(path))
    assert document["imports"][0]["platforms"] == [HOST]
    assert cri_pinned(node, list(info.refs)) == {info.refs[0]: True}
    check = node.ctr("images", "check").stdout
    assert info.refs[0] in check
    node.clear_images(cri.NAMESPACE)
    images.ensure_sandbox_image(node)
    everything = imported(node, "--all-platforms", str(path))
    assert everything["imports"][0]["platforms"] == [HOST, OTHER]
    # Every platform's manifest is in the content store now; only the host's is unpacked.
    for manifest in info.manifest_digests:
        assert node.ctr("content", "get", manifest, check=False).returncode == 0, manifest


def test_imported_content_survives_containerds_gc(node: ContainerdDaemon, tmp_path: pathlib.Path) -> None:
    """The GC reference labels hold every blob and the snapshots: a synchronous GC (after removing
    another image) leaves the imported image complete and unpacked."""
    keep_path, index_path, drop_path = tmp_path / "keep.tar", tmp_path / "index.tar", tmp_path / "drop.tar"
    (keep,) = archives.docker_archive(keep_path, [images.recipe("example.test/imp/keep:1", seed="gc-keep")])
    (index,) = archives.oci_archive(index_path, [images.recipe("example.test/imp/index:1", seed="gc-index",
                                                               platforms=[HOST, OTHER])])
    (drop,) = archives.oci_archive(drop_path, [images.recipe("example.test/imp/drop:1", seed="gc-drop")])
    for path in (keep_path, index_path, drop_path):
        imported(node, str(path))
    before = snapshots(node)
    cri_pinned(node, [*drop.refs, *keep.refs])  # the CRI has added its sha256: references
    node.ctr("images", "rm", "--sync", *drop.refs, f"sha256:{drop.image_id.split(':', 1)[1]}")
    checked = node.ctr("images", "check").stdout
    for kept in (keep, index):
        line = next(line for line in checked.splitlines() if line.startswith(kept.refs[0]))
        assert "complete" in line and "incomplete" not in line, checked
        chain = json.loads(node.ctr("content", "get", kept.config_digest).stdout)["rootfs"]["diff_ids"][0]
        assert chain in snapshots(node) and chain in before
    assert node.ctr("content", "get", drop.digest, check=False).returncode != 0  # the GC did run


def test_ctr_import_and_pinctl_import_unpack_to_the_same_snapshots(node: ContainerdDaemon, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "same.tar"
    archives.oci_archive(path, [images.recipe("example.test/imp/same:1", seed="same-snapshots")])
    before = snapshots(node)
    images.import_images(node, path, unpack=True, wait=True)
    by_ctr = snapshots(node) - before
    node.clear_images(cri.NAMESPACE)
    images.ensure_sandbox_image(node)
    node.ctr("snapshots", "--snapshotter", "native", "rm", *by_ctr, check=False)
    imported(node, str(path))
    assert by_ctr and by_ctr <= snapshots(node)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_broken_archive_is_refused_in_one_line_and_nothing_is_named(containerd17: ContainerdDaemon, name: str,
                                                                      clean_k8s_io: Callable[..., ContainerdDaemon]) -> None:
    daemon = clean_k8s_io(containerd17)
    daemon.collect_garbage()  # an earlier test's copy of the blob an archive lacks is gone, not pending
    before = records(daemon)
    result = run(daemon, "--pin", str(archives.CORPUS / name))
    assert result.returncode == 1, result.stdout + result.stderr
    refusals = [line for line in result.stderr.splitlines() if str(archives.CORPUS / name) in line
                and not line.startswith("pinctl: import:")]
    assert len(refusals) == 1, result.stderr
    assert EXPECTED[name] in refusals[0] and "Traceback" not in result.stderr
    time.sleep(0.2)
    assert records(daemon) == before


def test_one_broken_archive_beside_a_good_one_is_partial(containerd17: ContainerdDaemon, tmp_path: pathlib.Path,
                                                         clean_k8s_io: Callable[..., ContainerdDaemon]) -> None:
    daemon = clean_k8s_io(containerd17)
    good = tmp_path / "good.tar"
    (info,) = archives.oci_archive(good, [images.recipe("example.test/imp/beside:1", seed="beside")])
    document = imported(daemon, "--pin", str(archives.CORPUS / "missing-blob.tar"), str(good), expect=3)
    assert [i["action"] for i in document["imports"]] == ["failed", "imported"]
    assert document["status"] == "partial"
    assert cri_pinned(daemon, list(info.refs)) == {info.refs[0]: True}


def test_an_archive_past_the_budget_is_refused_before_anything_is_written(
        containerd17: ContainerdDaemon, tmp_path: pathlib.Path, clean_k8s_io: Callable[..., ContainerdDaemon]) -> None:
    daemon = clean_k8s_io(containerd17)
    path = tmp_path / "budget.tar"
    archives.oci_archive(path, [images.recipe("example.test/imp/budget:1", seed="budget")])
    result = pinctl(daemon, "import", "-r", daemon.address, "--max-usage", "0", str(path), "-o", "json")
    assert result.returncode == 1
    item = json.loads(result.stdout)["imports"][0]
    assert item["action"] == "failed" and "no room" in item["why"] and "budget of 0%" in item["why"]
    assert "example.test/imp/budget:1" not in records(daemon)


def test_progress_stays_off_a_pipe(containerd17: ContainerdDaemon, tmp_path: pathlib.Path,
                                   clean_k8s_io: Callable[..., ContainerdDaemon]) -> None:
    daemon = clean_k8s_io(containerd17)
    path = tmp_path / "quiet.tar"
    archives.oci_archive(path, [images.recipe("example.test/imp/quiet:1", seed="quiet")])
    result = run(daemon, str(path))
    assert result.returncode == 0, result.stderr
    assert "reading" not in result.stderr and "\x1b" not in result.stderr + result.stdout
    assert result.stderr.strip().splitlines()[-1].startswith("pinctl: import: 1 imported")
    assert "example.test/imp/quiet:1" in result.stdout and "imported" in result.stdout

"""An images directory kept true by one-shot sync, against containerd 1.7: an archive added is
imported and pinned as its own, found again by its stamp, replaced (the pin moves with its
references; what the new version no longer names is unpinned by --prune), removed (--prune
unpins, nothing is deleted); pins set by hand are never touched; the directories are held to
StrictModes as config files are. Read back with ctr and the CRI."""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Callable
from typing import Any

from tests.harness import archives, cri, images
from tests.harness.containerd import ContainerdDaemon
from tests.integration.pinctl_runner import pinctl

PIN = "io.cri-containerd.pinned"
ARCHIVE = "io.pinctl.archive"
STAMP = "io.pinctl.archive.stamp"


def sync(daemon: ContainerdDaemon, directory: pathlib.Path, *args: str, expect: int = 0,
         config: pathlib.Path | None = None) -> dict[str, Any]:
    where = ["--config", str(config)] if config else ["--import-dir", str(directory)]
    result = pinctl(daemon, "sync", *where, "-n", "k8s.io", "-r", daemon.address, "--max-usage", "95", *args,
                    "-o", "json")
    assert result.returncode == expect, result.stdout + result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def labels(daemon: ContainerdDaemon) -> dict[str, dict[str, str]]:
    return {row.ref: row.labels for row in daemon.images(cri.NAMESPACE)}


def pinned_by_cri(daemon: ContainerdDaemon, want: dict[str, bool]) -> None:
    """Wait until the CRI tells the kubelet exactly this for each reference."""
    cri.wait_for(daemon.address, lambda found: {ref: cri.by_tag(found)[ref].pinned if ref in cri.by_tag(found)
                                                else None for ref in want} == want)


def write_archive(directory: pathlib.Path, name: str, seed: str, *refs: str) -> list[images.ImageInfo]:
    scratch = directory.parent / f".{name}.partial"
    infos = archives.oci_archive(scratch, [images.recipe(*refs, seed=seed)])
    os.replace(scratch, directory / name)  # as an operator would drop a file in: whole, at once
    return infos


def test_the_directory_lifecycle_add_again_replace_remove(containerd17: ContainerdDaemon, tmp_path: pathlib.Path,
                                                          clean_k8s_io: Callable[..., ContainerdDaemon]) -> None:
    daemon = clean_k8s_io(containerd17)
    directory = tmp_path / "images"
    directory.mkdir()
    (first,) = write_archive(directory, "app.tar", "dir-v1", "example.test/dir/app:1")
    (directory / "README").write_text("not an archive\n")
    document = sync(daemon, directory)
    assert [(i["ref"], i["action"], i["pin"]) for i in document["imports"]] == [
        ("example.test/dir/app:1", "imported", "pinned")]
    found = labels(daemon)["example.test/dir/app:1"]
    assert found[PIN] == "pinned" and found[ARCHIVE] == str(directory / "app.tar") and found[STAMP]
    pinned_by_cri(daemon, {"example.test/dir/app:1": True})

    again = sync(daemon, directory)
    assert [(i["action"], i["pin"]) for i in again["imports"]] == [("present", "already-pinned")]
    assert again["imports"][0]["size"] is None  # found by its stamp: not read again

    # A new version under the same name: the reference follows it, pinned; a new one too.
    (second, ) = write_archive(directory, "app.tar", "dir-v2", "example.test/dir/app:1", "example.test/dir/app:2")
    replaced = sync(daemon, directory)
    assert {(i["ref"], i["action"]) for i in replaced["imports"]} == {
        ("example.test/dir/app:1", "imported"), ("example.test/dir/app:2", "imported")}
    listed = cri.wait_for(daemon.address, lambda found: cri.by_tag(found).get("example.test/dir/app:1") is not None
                          and cri.by_tag(found)["example.test/dir/app:1"].id == second.image_id)
    assert cri.by_tag(listed)["example.test/dir/app:1"].pinned
    old = [image for image in listed if image.id == first.image_id]
    assert all(not image.pinned for image in old)  # the pin moved off the old image

    # A version naming only app:3: app:1 and app:2 stay pinned until --prune says otherwise.
    write_archive(directory, "app.tar", "dir-v3", "example.test/dir/app:3")
    sync(daemon, directory)
    now = labels(daemon)
    assert all(now[f"example.test/dir/app:{n}"].get(PIN) == "pinned" for n in (1, 2, 3))
    pruned = sync(daemon, directory, "--prune", "--allow-empty-policy")
    assert {(r["ref"], r["action"]) for r in pruned["results"]} >= {
        ("example.test/dir/app:1", "pruned"), ("example.test/dir/app:2", "pruned")}
    now = labels(daemon)
    assert PIN not in now["example.test/dir/app:1"] and ARCHIVE not in now["example.test/dir/app:1"]
    assert now["example.test/dir/app:3"][PIN] == "pinned"

    # Removed: --prune unpins; the image stays for the kubelet's GC to take.
    (directory / "app.tar").unlink()
    gone = sync(daemon, directory, "--prune")
    assert ("example.test/dir/app:3", "pruned") in {(r["ref"], r["action"]) for r in gone["results"]}
    now = labels(daemon)
    assert "example.test/dir/app:3" in now and PIN not in now["example.test/dir/app:3"]
    pinned_by_cri(daemon, {"example.test/dir/app:3": False, "example.test/dir/app:1": False})


def test_a_hand_pin_is_never_taken_over_nor_pruned(containerd17: ContainerdDaemon, tmp_path: pathlib.Path,
                                                   clean_k8s_io: Callable[..., ContainerdDaemon]) -> None:
    daemon = clean_k8s_io(containerd17)
    directory = tmp_path / "images"
    directory.mkdir()
    write_archive(directory, "mine.tar", "hand", "example.test/dir/mine:1")
    images.load_images(daemon, tmp_path / "load", [images.recipe("example.test/dir/mine:1", seed="hand")])
    daemon.label_image("example.test/dir/mine:1", {PIN: "pinned"})
    config = tmp_path / "config.toml"
    config.write_text(f'import_dirs = ["{directory}"]\n')
    document = sync(daemon, directory, config=config)
    assert [(i["action"], i["pin"]) for i in document["imports"]] == [("present", "already-pinned")]
    assert ARCHIVE not in labels(daemon)["example.test/dir/mine:1"]
    (directory / "mine.tar").unlink()
    sync(daemon, directory, "--prune", config=config)
    assert labels(daemon)["example.test/dir/mine:1"][PIN] == "pinned"


def test_a_directory_others_can_write_is_refused_and_its_pins_kept(containerd17: ContainerdDaemon,
                                                                  tmp_path: pathlib.Path,
                                                                  clean_k8s_io: Callable[..., ContainerdDaemon]) -> None:
    daemon = clean_k8s_io(containerd17)
    directory = tmp_path / "images"
    directory.mkdir()
    write_archive(directory, "strict.tar", "strict", "example.test/dir/strict:1")
    sync(daemon, directory)
    directory.chmod(0o777)
    try:
        (directory / "strict.tar").unlink()
        document = sync(daemon, directory, "--prune", "--allow-empty-policy", expect=1)
        (item,) = document["imports"]
        assert item["action"] == "failed" and "writable by a user other than root" in item["why"]
        assert labels(daemon)["example.test/dir/strict:1"][PIN] == "pinned"
    finally:
        directory.chmod(0o755)


def test_a_broken_archive_in_the_directory_is_one_failure_beside_the_good(containerd17: ContainerdDaemon,
                                                                          tmp_path: pathlib.Path,
                                                                          clean_k8s_io: Callable[..., ContainerdDaemon]
                                                                          ) -> None:
    daemon = clean_k8s_io(containerd17)
    directory = tmp_path / "images"
    directory.mkdir()
    write_archive(directory, "good.tar", "dir-good", "example.test/dir/good:1")
    (directory / "bad.tar").write_bytes((archives.CORPUS / "symlink-escape.tar").read_bytes())
    document = sync(daemon, directory, expect=3)
    actions = {(pathlib.Path(i["archive"]).name, i["action"]) for i in document["imports"]}
    assert actions == {("bad.tar", "failed"), ("good.tar", "imported")}
    assert labels(daemon)["example.test/dir/good:1"][PIN] == "pinned"


def test_the_watcher_imports_an_archive_dropped_in_and_unpins_one_removed(
        containerd17: ContainerdDaemon, tmp_path: pathlib.Path, clean_k8s_io: Callable[..., ContainerdDaemon]) -> None:
    """sync --watch --prune with import_dirs: an archive dropped into the directory is imported
    and pinned with no restart; removed, its image is unpinned (never deleted). The deadlines
    only end a hung test: the same watcher sees both changes, so its directory poll did it."""
    from tests.integration.test_watch import watchers

    daemon = clean_k8s_io(containerd17)
    directory = tmp_path / "images"
    directory.mkdir()
    (first,) = write_archive(directory, "base.tar", "watch-base", "example.test/dir/base:1")
    for start in watchers(tmp_path):
        policy = f'import_dirs = ["{directory}"]\npinned_images = ["example.test/other/*"]\n'
        watcher = start(daemon, policy, "--prune", "-n", "k8s.io", "--max-usage", "95")
        assert labels(daemon)["example.test/dir/base:1"].get(ARCHIVE) == str(directory / "base.tar")
        write_archive(directory, "late.tar", "watch-late", "example.test/dir/late:1")
        watcher.wait_log("import imported", timeout=60)
        pinned_by_cri(daemon, {"example.test/dir/base:1": True, "example.test/dir/late:1": True})
        (directory / "late.tar").unlink()
        watcher.wait_log("pruned", timeout=60)
        pinned_by_cri(daemon, {"example.test/dir/base:1": True, "example.test/dir/late:1": False})
        assert "example.test/dir/late:1" in labels(daemon)  # unpinned, not deleted
        assert watcher.terminate()[0] == 0

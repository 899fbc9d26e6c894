"""pinctl history, and the pointers of ls and check, on real containerd (1.7, 2.1, 2.4.2): an image
the policy wants is deleted with ctr, the journal holds its deletion as the watcher writes it
(the Journal class; the watcher's side is tested by its own tests), and every command an
operator reaches for says who deleted it. history itself asks no daemon."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

from tests.harness import cri, images
from tests.harness.containerd import ContainerdDaemon
from tests.integration.pinctl_runner import pinctl

from pinctl.journal import DELETER_OUTSIDE_CRI, Deletion
from pinctl.journal.store import Journal

LoadImages = Callable[..., list[images.ImageInfo]]
GONE = "example.test/hist-gone:1"
KEPT = "example.test/hist-kept:1"


def test_ls_check_and_history_name_who_deleted_a_wanted_image(modern_containerd: ContainerdDaemon,
                                                               load_images: LoadImages, tmp_path: Path) -> None:
    ctd = modern_containerd
    gone, _kept = load_images(ctd, [images.recipe(GONE, seed="hist-gone"), images.recipe(KEPT, seed="hist-kept")])
    journal = tmp_path / "history"
    env = {"PINCTL_HISTORY_DIR": str(journal), "PINCTL_PINNED_IMAGES": f"{GONE},{KEPT}"}
    present = pinctl(ctd, "ls", env=env)
    assert present.returncode == 0 and "history" not in present.stderr, present.stderr

    # ctr deletes the image (its name and the sha256: reference containerd's CRI added), and the
    # journal records it as sync --watch does.
    image_id = gone.config_digest
    ctd.remove_images([GONE, image_id])
    cri.wait_for(ctd.address, lambda listed: all(image.id != image_id for image in listed))
    Journal(str(journal)).append(Deletion(
        time=time.time() - 5400, runtime="containerd", namespace="k8s.io", refs=(GONE, image_id), image_id=image_id,
        size=gone.size, wanted=(f"pattern {GONE}",), pinned=("label",), deleter=DELETER_OUTSIDE_CRI,
        evidence="cri-proxy served and saw no RemoveImage"))

    listed = pinctl(ctd, "ls", env=env)
    assert listed.returncode == 0 and KEPT in listed.stdout and GONE not in listed.stdout
    assert (f"pinctl: ls: {GONE}, wanted by the policy (env PINCTL_PINNED_IMAGES), is not on the node: deleted 90m "
            f"ago outside the CRI (ctr, nerdctl or docker: cri-proxy saw no RemoveImage); see pinctl history {GONE}"
            ) in listed.stderr, listed.stderr
    assert KEPT not in listed.stderr

    one = pinctl(ctd, "ls", GONE, env=env)
    assert one.returncode == 0
    assert f"pinctl: ls: no image matches {GONE}: deleted 90m ago outside the CRI" in one.stderr, one.stderr

    checked = pinctl(ctd, "check", "--runtime-endpoint", f"unix://{ctd.address}", "-o", "json", GONE, env=env)
    assert checked.returncode == 1, checked.stderr
    [item] = json.loads(checked.stdout)["images"]
    assert item["refs"] == [GONE] and item["cause"].startswith(
        "the runtime knows no image by this name: it was deleted 90m ago outside the CRI"), item
    assert f"pinctl history {GONE}" in item["fix"]

    # history reads files only: with containerd's socket pointing nowhere it answers all the same.
    nowhere = {**env, "CONTAINERD_ADDRESS": str(tmp_path / "no-such.sock"),
               "CONTAINER_RUNTIME_ENDPOINT": f"unix://{tmp_path / 'no-such.sock'}"}
    shown = pinctl(ctd, "history", GONE, env=nowhere)
    assert shown.returncode == 0, shown.stderr
    [header, row] = shown.stdout.splitlines()
    assert header.split() == ["TIME", "IMAGE", "WANTED", "PINNED", "DELETER", "WHY"]
    assert re.split(r" {3,}", row)[1:5] == [GONE, f"pattern {GONE}", "label", "outside the CRI"], row
    by_id = pinctl(ctd, "history", "-o", "json", image_id.split(":")[1][:12], env=nowhere)
    assert [entry["refs"] for entry in json.loads(by_id.stdout)["entries"]] == [[GONE, image_id]]
    missing = pinctl(ctd, "history", KEPT, env=nowhere)
    assert missing.returncode == 1 and f"no deletion of {KEPT}" in missing.stderr

"""gc plan dates an image by when its ID came to the node, as the kubelet does, on real containerd.

containerd keeps an image record's creation time when an import or a pull re-points it, and a
label write moves its update time; the kubelet keys its records by image ID. pinctl takes the
creation of the CRI's ``sha256:<id>`` record (or its config blob's commit without one): these tests
re-point a tag, write and remove a pin label, and read gc plan's first-detected time back.
With no kubelet for this containerd, that time is the arrival itself (``image_created``).
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.harness import images
from tests.harness.containerd import ContainerdDaemon
from tests.integration.pinctl_runner import pinctl

pytestmark = pytest.mark.integration

# gc plan's JSON times are whole seconds: the two loads are further apart than that.
APART_S = 2.1


def plan_times(daemon: ContainerdDaemon) -> dict[str, tuple[datetime, str]]:
    done = pinctl(daemon, "gc", "plan", "-r", daemon.address, "-n", "k8s.io", "--usage", "99", "-o", "json")
    assert done.returncode in (0, 1), done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return {entry["id"]: (datetime.fromisoformat(entry["first_detected"].replace("Z", "+00:00")),
                          entry["first_detected_source"]) for entry in document["gc"]["order"]}


def test_a_repointed_tag_and_a_label_write_leave_each_image_its_own_arrival(daemon: ContainerdDaemon,
                                                                              tmp_path: Path) -> None:
    old, kept = images.load_images(daemon, tmp_path, [images.recipe("example.test/arrival/app:1", seed="arrival-old"),
                                                      images.recipe("example.test/arrival/other:1", seed="arrival-kept")])
    # The old image keeps a name of its own, so it stays listed once app:1 moves.
    daemon.ctr("images", "tag", old.refs[0], "example.test/arrival/old:1", namespace="k8s.io")
    time.sleep(APART_S)
    moved_at = time.time()
    (new,) = images.load_images(daemon, tmp_path, [images.recipe("example.test/arrival/app:1", seed="arrival-new")])
    assert new.image_id != old.image_id
    for command in ("pin", "unpin"):  # a label write on the older image's record, and its removal
        written = pinctl(daemon, command, "-n", "k8s.io", kept.refs[0])
        assert written.returncode == 0, written.stderr
    times = plan_times(daemon)
    assert times[new.image_id][1] == times[old.image_id][1] == times[kept.image_id][1] == "image_created"
    # The record app:1 was made with the old image; the new image arrived with the second load.
    assert times[new.image_id][0].timestamp() >= int(moved_at)
    assert times[old.image_id][0].timestamp() < int(moved_at)
    # The label write and its removal did not make the other image any younger.
    assert times[kept.image_id][0].timestamp() < int(moved_at)

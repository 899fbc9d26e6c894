"""The real kubelet's eviction manager against ``pinctl gc plan``'s eviction section.

A node of its own (``kubelet_node``: containerd 1.7 on a 192 MiB loop-mounted ext4, the kubelet's
imagefs) with a static pod's image in use, a pinned image, the sandbox image and three unused
images. The kubelet runs once to start the pod, then stops (the pod's container keeps running).
With the imagefs filled past ``evictionHard: imagefs.available``, ``pinctl gc plan -o json``
reads the kubelet's config file and says the signal is met and what ``DeleteUnusedImages``
deletes; GC thresholds of 99/98% make clear the periodic GC deletes nothing. Then the kubelet
starts again: its eviction manager (every 10 s) must delete exactly those images, and nothing
else, within seconds. What it did is read from its own log and the CRI, never from pinctl.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import time

import pytest

from tests.harness import cri, cri_pods, images, kubelet, runnable
from tests.harness.kubelet_fixtures import KubeletNode
from tests.integration.pinctl_runner import pinctl

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
PIN_LABEL = "io.cri-containerd.pinned"
# Short, but not 0 (a zero imageMinimumGCAge is defaulted to 2m).
MIN_AGE_S = 3
EVICTION_THRESHOLD = 40 * MIB
# How far below the threshold the filler leaves the imagefs: less than the unused images free.
PRESSURE_MARGIN = 4 * MIB
# The eviction manager checks every 10 s; its first check can come before the minimum age.
EVICTION_WAIT_S = 60.0


def _fill(path: pathlib.Path, size: int) -> None:
    """Blocks allocated on the imagefs beside containerd's root: statfs counts them as used at once."""
    with open(path, "wb") as handle:
        os.posix_fallocate(handle.fileno(), 0, size)


def test_gc_plan_says_what_the_eviction_manager_deletes_under_imagefs_pressure(kubelet_node: KubeletNode) -> None:
    node = kubelet_node
    (sleeper,) = node.load_runnable([runnable.runnable_recipe("example.test/evict-sleeper:1")])
    unused = node.load_images(
        [images.recipe(f"example.test/evict-unused-{size}:1", layer_bytes=size * MIB, compress=False)
         for size in (6, 10, 14)]
    )
    (pinned,) = node.load_images([images.recipe("example.test/evict-pinned:1", layer_bytes=8 * MIB, compress=False)])
    node.daemon.label_image(pinned.refs[0], {PIN_LABEL: "pinned"})
    cri.wait_for(node.address, lambda listed: any(i.id == pinned.image_id and i.pinned for i in listed))
    loaded_at = datetime.datetime.now(datetime.timezone.utc)

    made = node.new_kubelet(
        gc=kubelet.GcPolicy(high_threshold_percent=99, low_threshold_percent=98, min_age=f"{MIN_AGE_S}s"),
        # nodefs (the host's filesystem under its --root-dir) is far from 1%: it only shows that
        # gc plan finds the kubelet's root dir and tells it from the dedicated imagefs.
        eviction_hard={"imagefs.available": f"{EVICTION_THRESHOLD // MIB}Mi", "nodefs.available": "1%"},
    )
    pod = kubelet.StaticPod("sleeper", sleeper.refs[0])
    made.add_static_pod(pod)
    node.start(made)
    cri_pods.running_container(node.address, made.static_pod_name(pod))
    made.stop()
    # Past the minimum age by the records' times, which is how gc plan dates images with no kubelet running.
    time.sleep(max(0.0, (loaded_at + datetime.timedelta(seconds=MIN_AGE_S + 1)
                         - datetime.datetime.now(datetime.timezone.utc)).total_seconds()))
    assert made.removals() == []

    _fill(node.fs.path / "filler", node.fs.available - (EVICTION_THRESHOLD - PRESSURE_MARGIN))
    args = ("gc", "plan", "-r", f"unix://{node.address}", "--kubelet-config", str(made.config_path))
    result = pinctl(node.daemon, *args, "-o", "json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)["gc"]
    evicting = plan["eviction"]
    assert plan["freed_bytes"] == 0 and not any(entry["deleted"] for entry in plan["order"])
    assert evicting["met"] is True and evicting["deletes_now"] is True
    assert evicting["config_source"] == str(made.config_path)
    [signal] = [s for s in evicting["signals"] if s["signal"] == "imagefs.available"]
    assert signal["met"] and signal["threshold"] == "40Mi" and signal["threshold_value"] == EVICTION_THRESHOLD
    assert signal["available"] < EVICTION_THRESHOLD and f"{made.config_path} evictionHard" == signal["source"]
    planned = {entry["id"]: entry["size"] for entry in evicting["order"] if entry["deleted"]}
    assert set(planned) == {info.image_id for info in unused}
    assert evicting["freed_bytes"] == sum(planned.values())
    text = pinctl(node.daemon, *args)
    assert "Eviction:    met: imagefs.available<40Mi" in text.stdout, text.stdout + text.stderr

    since = len(made.log_text())
    node.start(made)
    removed = made.wait_for_removals(len(planned), EVICTION_WAIT_S, since=since)
    made.wait_for_log("able to reduce resource pressure without evicting pods", EVICTION_WAIT_S, since=since)
    # That pass is over and the signal resolved: what it deleted is final.
    assert {r.image_id: r.size for r in made.removals(since)} == planned, removed
    left = {image.id for image in cri.list_images(node.address)}
    kept = {item["id"] for item in plan["protected"]}
    assert left == kept and sleeper.image_id in left and pinned.image_id in left

    # With the kubelet running, gc plan reads its --root-dir: a filesystem other than the imagefs.
    after = json.loads(pinctl(node.daemon, *args, "-o", "json").stdout)["gc"]["eviction"]
    assert after["met"] is False and after["dedicated_imagefs"] is True
    [nodefs] = [s for s in after["signals"] if s["signal"] == "nodefs.available"]
    assert str(made.root_dir) in nodefs["fs_source"] and nodefs["reclaims_images"] is False

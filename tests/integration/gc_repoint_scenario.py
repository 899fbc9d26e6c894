"""Tags re-pointed mid-window, against the real kubelet: one scenario of the shared periodic run.

containerd keeps an image record's creation time when an import or a pull moves its tag to a new
image. The kubelet keys its records by image ID, so the new image is first seen by a pass after
it came. Here, 30 s after the kubelet's first GC run, ``app:1`` is re-pointed by an import and
``tool:1`` by a pull from a loopback registry, and ``unused-4:1`` is pinned and unpinned (two
label writes). At the second run the usage needs more than the three old unpinned images hold
(``unused-4``, and the images the two tags left, still listed under the digest names the CRI
gave them), the minimum age is 90 s: the kubelet deletes those three, skips the two new ones as
too young (no pass saw them) and falls short. ``gc plan`` must say the same: dated by their
IDs' arrival, the new images are ``not_detected``, the label writes leave ``unused-4`` as old as
the kubelet's first pass.
"""

from __future__ import annotations

from typing import Any

from tests.harness import images
from tests.harness import registry as reg
from tests.harness.kubelet import GcPolicy, StaticPod
from tests.harness.kubelet_periodic import FILL_AHEAD_S, MIB, PERIOD_S, PeriodicNode, Plan, SecondRun
from tests.harness.runnable import runnable_recipe
from tests.integration.pinctl_runner import pinctl

LATE_AT_S = 30.0
LABEL_AT_S = 60.0
LOW = 50
APP = "example.test/repoint/app:1"
UNUSED = "example.test/repoint/unused-4:1"


def repointed(plan_for: Any) -> Any:
    """The scenario; ``plan_for(node)`` is test_kubelet_gc's gc plan against the node."""

    def scenario(node: PeriodicNode) -> SecondRun:
        daemon = node.containerd("containerd-1.7")
        registry = reg.Registry(node.base_dir / "registry").start()
        node.on_close(registry.stop)
        tool = f"{registry.host}/repoint/tool:1"
        (sleeper,) = node.load_runnable(runnable_recipe("example.test/repoint/sleeper:1"))
        old_app, old_tool, unused = node.load_plain((APP, 6), (tool, 10), (UNUSED, 4))
        new_tool = registry.push(node.base_dir / "push", images.recipe(tool, seed="repoint-new-tool",
                                                                        layer_bytes=12 * MIB, compress=False))
        pod = StaticPod("sleeper", sleeper.refs[0])
        node.start(GcPolicy(LOW + 1, LOW, min_age="90s"), [pod])
        node.running(pod)
        node.at(LATE_AT_S)
        (new_app,) = node.load_plain((APP, 8))  # the same name: the record now points at a new image
        daemon.ctr("images", "pull", "--plain-http", "--snapshotter", "native", tool)
        node.at(LABEL_AT_S)
        writes = [pinctl(daemon, command, "-n", "k8s.io", UNUSED) for command in ("pin", "unpin")]
        node.notes.update(old={old_app.image_id, old_tool.image_id, unused.image_id},
                          new={new_app.image_id, new_tool.image_id}, unused=unused.image_id,
                          writes=[(w.returncode, w.stderr) for w in writes], sleeper=sleeper.image_id)
        node.at(PERIOD_S - FILL_AHEAD_S)
        # Beyond the three old images (20 MiB), within reach if either new one counted.
        node.fill_for(24 * MIB, LOW)
        planned: Plan = plan_for(node)
        return node.second_run(planned)

    return scenario


def assert_outcome(run: SecondRun) -> None:
    notes = run.notes
    assert all(code == 0 for code, _ in notes["writes"]), notes["writes"]
    assert set(run.removed_ids) == notes["old"], "the kubelet deleted the old images and only those"
    left = {image.id for image in run.images_after}
    assert notes["new"] | {notes["sleeper"]} <= left
    assert run.outcome.startswith("failed") and run.plan["outcome"] == "shortfall"
    assert run.plan["message"] == run.error, (run.plan["message"], run.error)
    entries = {entry["id"]: entry for entry in run.plan["order"]}
    for image_id in notes["new"]:
        assert (entries[image_id]["fate"], entries[image_id]["first_detected_source"]) == ("too_young", "not_detected")
    assert entries[notes["unused"]]["first_detected_source"] == "kubelet_start"

"""A tie the threshold step stops inside, against two real kubelets: two nodes of the shared
periodic run, set up alike.

Sixteen never-used images of the same size, all there before the kubelet started, are one tie:
the kubelet ranks them equal and walks them in the order its Go map of image records gives,
which differs from one kubelet to the next. The second run must free about seven and a half of
them, so it deletes eight and stops; which eight is chance. ``gc plan`` must not claim to know:
it says "8 of these 16", with what they free, and the two kubelets, choosing differently, must
both land inside that claim. The odds that two kubelets pick the same eight are 1 in 12,870 if
map order is uniform; a failure saying they chose alike is that, not a fault in pinctl.
"""

from __future__ import annotations

from typing import Any

from tests.harness.kubelet import GcPolicy, StaticPod
from tests.harness.kubelet_periodic import FILL_AHEAD_S, PERIOD_S, PeriodicNode, SecondRun
from tests.harness.runnable import runnable_recipe

LOW = 50
TIED = 16
NODES = ("tie_a", "tie_b")


def tied_node(plan_for: Any) -> Any:
    """The scenario; ``plan_for(node)`` is test_kubelet_gc's gc plan against the node."""

    def scenario(node: PeriodicNode) -> SecondRun:
        node.containerd("containerd-1.7")
        (sleeper,) = node.load_runnable(runnable_recipe("example.test/tie/sleeper:1"))
        tied = node.load_plain(*((f"example.test/tie/unused-{n:02}:1", 2) for n in range(TIED)))
        pod = StaticPod("sleeper", sleeper.refs[0])
        node.start(GcPolicy(LOW + 1, LOW, min_age="3s"), [pod])
        node.running(pod)
        node.at(PERIOD_S - FILL_AHEAD_S)
        size = max(info.size for info in tied)
        node.fill_for(size * 15 // 2, LOW)  # seven and a half of them: eight go, whatever the order
        node.notes.update(tied={info.image_id for info in tied}, sleeper=sleeper.image_id)
        return node.second_run(plan_for(node))

    return scenario


def assert_within_the_claim(run: SecondRun) -> None:
    """The kubelet deleted only members of the tie gc plan said it stops inside, as many as the
    plan said, freeing what it said; and the tie is the sixteen images."""
    ties = [tie for tie in run.plan["ties"] if tie["straddled"]]
    assert len(ties) == 1, run.plan["ties"]
    (tie,) = ties
    assert run.notes["tied"] <= set(tie["image_ids"]), "the sixteen never-used images are one tie"
    assert set(run.removed_ids) <= set(tie["image_ids"]), "the kubelet deleted only members of the tie"
    assert tie["deleted_min"] <= len(run.removals) <= tie["deleted_max"], (tie, run.removed_ids)
    freed = sum(removal.size for removal in run.removals)
    assert tie["freed_min"] <= freed <= tie["freed_max"], (tie, freed)
    assert run.plan["outcome"] == "freed_enough" and run.outcome == "succeeded"
    assert run.notes["sleeper"] in {image.id for image in run.images_after}
    entries = [entry for entry in run.plan["order"] if entry["id"] in tie["image_ids"]]
    assert {entry["tie_group"] for entry in entries} == {tie["number"]}


def assert_chose_differently(runs: list[SecondRun]) -> None:
    picks = [frozenset(run.removed_ids) for run in runs]
    assert len(set(picks)) > 1, (
        f"every kubelet deleted the same {len(picks[0])} of the tie (odds about 1 in 12,870 with two nodes): "
        "the test shows nothing this time; run it again")

"""The real kubelet's GC through ``pinctl cri-proxy`` when the proxy refuses one of its deletes,
as a scenario of the shared periodic run (tests/integration/test_kubelet_gc.py).

The kubelet never asks to remove what the proxy's lists report pinned; it asks when a pin lands
after its list. Here the proxy follows no image events and reads the pins only every 600 s
(``--no-events --refresh 600``), so the list the kubelet's second GC run reads is the one from
before the pin; ``RemoveImage`` re-reads them and refuses. containerd 1.6.20, whose CRI ignores the pin
label, so that only the proxy can defend the image.

What v1.37.2's image_gc_manager.go does with that (read there): ``GarbageCollect`` lists the
images, runs the age pass (``freeOldImages``, imageMaximumGCAge 4m here: every image never used
qualifies), which goes on past a failed ``freeImage`` to the next image, then returns an error
naming the failures; ``GarbageCollect`` returns it at once, before it reads the disk usage: the
threshold pass does not run, though the usage is over the high threshold. Observed: both other
never-used images deleted, the pinned one still there, no "over the high threshold" line, the run
"failed once" with the proxy's message, and the journal holding the kubelet's three RemoveImage
calls (two forwarded, one refused) with its pid and name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pinctl.journal import REQUEST_FORWARDED, REQUEST_REFUSED, RemoveRequest
from pinctl.journal.store import Journal
from tests.harness.criproxy_process import ProxyProcess
from tests.harness.kubelet import GcPolicy, StaticPod
from tests.harness.kubelet_periodic import FILL_AHEAD_S, MIB, PERIOD_S, PeriodicNode, Plan, Scenario, SecondRun
from tests.harness.runnable import runnable_recipe

PIN = "io.cri-containerd.pinned"
DEFENDED = "example.test/defended:1"
LOW = 50
PlanFor = Callable[..., Plan]


def refused_in_age_pass(relay: str, plan_for: PlanFor) -> Scenario:
    def scenario(node: PeriodicNode) -> SecondRun:
        daemon = node.containerd("containerd-1.6")
        (sleeper,) = node.load_runnable(runnable_recipe("example.test/sleeper:1", payload_bytes=4096))
        unused = node.load_plain(("example.test/unused-6:1", 6), ("example.test/unused-10:1", 10))
        (defended,) = node.load_plain((DEFENDED, 4))
        proxy = ProxyProcess(daemon, node.address, "--relay", relay, "--no-events", "--refresh", "600")
        node.on_close(proxy.stop)
        proxy.wait_serving()
        endpoint = f"unix://{proxy.path}"
        pod = StaticPod("sleeper", sleeper.refs[0])
        made = node.start(GcPolicy(55, LOW, min_age="3s", max_age="4m"), [pod], endpoint=endpoint)
        node.running(pod)
        node.at(PERIOD_S - FILL_AHEAD_S)
        node.fill_for(12 * MIB, LOW)  # over the high threshold of 55%, as age_then_threshold
        node.notes.update(unused={i.image_id for i in unused}, defended=defended.image_id, sleeper=sleeper.image_id,
                          kubelet_pid=made.pid)
        plan = plan_for(node, endpoint)

        def pin_then_plan() -> Any:
            # The proxy read the pins when it started and follows no events: the kubelet's
            # next list is that answer again, for 600 s.
            daemon.label_image(DEFENDED, {PIN: "pinned"})
            node.notes["listed_pinned"] = {i.id: i.pinned for i in _listing(proxy)}
            return plan()

        run = node.second_run(pin_then_plan)
        run.notes["journal"] = [e for e in Journal(str(proxy.history)).read().entries if isinstance(e, RemoveRequest)]
        run.notes["over_threshold_lines"] = [line for line in made.log_text().splitlines()
                                             if "over the high threshold" in line]
        return run

    return scenario


def _listing(proxy: ProxyProcess) -> list[Any]:
    from tests.harness import cri

    return cri.list_images(proxy.path)


def assert_outcome(run: SecondRun) -> None:
    notes = run.notes
    defended, unused = notes["defended"], notes["unused"]
    # The proxy's list still said unpinned (the window this scenario makes) ...
    assert notes["listed_pinned"][defended] is False, notes["listed_pinned"]
    # ... so the kubelet's age pass asked for all three never-used images, and went on past the refusal.
    assert set(run.removed_ids) == unused | {defended}, run.removed_ids
    left = {image.id for image in run.images_after}
    assert defended in left and not unused & left and notes["sleeper"] in left
    # The failure ended the run before the threshold pass: no usage line, though over 55%.
    assert run.outcome.startswith("failed"), run.outcome
    assert "wanted to free images older than 4m0s" in run.error and "refused to remove" in run.error, run.error
    assert run.usage is None and notes["over_threshold_lines"] == [], notes["over_threshold_lines"]
    journal: list[RemoveRequest] = notes["journal"]
    by_image = {entry.image_id: entry for entry in journal}
    assert set(by_image) == unused | {defended}, journal
    assert by_image[defended].outcome == REQUEST_REFUSED and "pin label" in by_image[defended].detail
    assert all(by_image[image].outcome == REQUEST_FORWARDED for image in unused), journal
    assert {(entry.client, entry.pid) for entry in journal} == {("kubelet", notes["kubelet_pid"])}, journal

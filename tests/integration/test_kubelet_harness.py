"""A real kubelet (standalone, built from source) against containerd 1.7: static pods and image GC.

Each test has a node of its own (``kubelet_node``): containerd 1.7 whose root is on a 192 MiB
loop-mounted ext4, the kubelet's imagefs. What the kubelet did is read back through the CRI, the
filesystem's statfs and the kubelet's own log (level 5), never from pinctl.

The GC scenario makes the kubelet's image GC run within seconds, not at its 5-minute period:
filling the imagefs below the eviction threshold makes the eviction manager (every 10 s) call
``DeleteUnusedImages``, which walks the same eviction order as the periodic GC with no byte limit.
The periodic GC itself, against ``pinctl gc plan``, is in test_kubelet_gc.py (its scenarios
share one 5-minute wait).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import pathlib
import re
import time
from collections.abc import Callable

import pytest

from pinctl.gc import estimate as gcestimate
from pinctl.gc import model as gcmodel
from tests.harness import cri, cri_pods, images, kubelet, runnable
from tests.harness.kubelet_fixtures import KubeletNode

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
PIN_LABEL = "io.cri-containerd.pinned"
POD_TIMEOUT_S = 30.0
# Short, but not 0: a zero imageMinimumGCAge is defaulted to 2m.
MIN_AGE_S = 3
# The eviction manager's own period (pkg/kubelet evictionMonitoringPeriod), plus slack.
EVICTION_WAIT_S = 30.0
EVICTION_THRESHOLD = 40 * MIB
# How far below the threshold the filler leaves the imagefs: less than the unused images free.
PRESSURE_MARGIN = 4 * MIB
# klog stamps a line as it writes it, after the kubelet took the time it records: the lastUsed set
# in the first detection pass can be a little earlier than that pass's "Image ID is new" line.
LOG_STAMP_SLACK = datetime.timedelta(seconds=1)



def _kernel_tunables() -> dict[str, str]:
    return {name: pathlib.Path("/proc/sys", name).read_text().strip() for name in kubelet.KERNEL_TUNABLES}


def test_a_static_pod_runs_and_the_host_is_left_alone(
    kubelet_node: KubeletNode, record_property: Callable[[str, object], None]
) -> None:
    (sleeper,) = kubelet_node.load_runnable([runnable.runnable_recipe("example.test/kubelet-sleeper:1")])
    tunables = _kernel_tunables()
    made = kubelet_node.new_kubelet()
    pod = kubelet.StaticPod("sleeper", sleeper.refs[0])
    made.add_static_pod(pod)

    began = time.monotonic()
    kubelet_node.start(made)
    healthy = time.monotonic() - began
    container = cri_pods.running_container(kubelet_node.address, made.static_pod_name(pod))
    running = time.monotonic() - began
    record_property("kubelet_healthy_s", round(healthy, 2))
    record_property("static_pod_running_s", round(running, 2))
    print(f"kubelet {kubelet_node.build.version}: healthy in {healthy:.2f}s, static pod running in {running:.2f}s")

    assert (container.name, container.image_ref) == ("main", sleeper.image_id)
    assert made.healthz() == "ok"
    # What it writes outside --root-dir went to the private directories bound in its namespace.
    private = made.base_dir / "host"
    assert (private / "var-lib" / "kubelet" / "device-plugins" / "kubelet.sock").exists()
    links = [link.name for link in (private / "var-log" / "containers").iterdir()]
    assert [name.split("-")[0] for name in links] == ["sleeper"] and f"_default_main-{container.id}" in links[0]
    assert _kernel_tunables() == tunables

    # Without its manifest the kubelet stops the pod (the container may be removed later).
    made.remove_static_pod(pod.name)
    _wait_until(lambda: _nothing_runs(kubelet_node), "pod stopped")


def _nothing_runs(node: KubeletNode) -> bool:
    running = [c for c in cri_pods.list_containers(node.address) if c.state == "running"]
    return not running and not any(sandbox.ready for sandbox in cri_pods.list_pod_sandboxes(node.address))


def _wait_until(condition: Callable[[], bool], what: str, timeout: float = POD_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {timeout}s")
        time.sleep(0.1)


@dataclasses.dataclass(frozen=True)
class Scenario:
    """The images of the GC tests, imported before the kubelet starts."""

    sleeper: images.ImageInfo  # the static pod runs it
    was_used: images.ImageInfo  # a harness container uses it when the kubelet starts, then goes
    unused: list[images.ImageInfo]  # never used: they tie in the eviction order
    pinned: images.ImageInfo  # labelled io.cri-containerd.pinned=pinned
    user_pod: str  # the harness pod using was_used

    def records(self, first_seen: datetime.datetime, now: datetime.datetime, was_used_at: datetime.datetime) -> list[gcmodel.GcImage]:
        """What the kubelet holds for them: all first seen together, the sleeper in use now."""
        return [
            gcmodel.GcImage(self.sleeper.image_id, self.sleeper.size, first_seen, now),
            gcmodel.GcImage(self.was_used.image_id, self.was_used.size, first_seen, was_used_at),
            *(gcmodel.GcImage(info.image_id, info.size, first_seen) for info in self.unused),
            gcmodel.GcImage(self.pinned.image_id, self.pinned.size, first_seen, pinned=True),
        ]


def _scenario(node: KubeletNode) -> Scenario:
    sleeper, was_used = node.load_runnable(
        [
            runnable.runnable_recipe("example.test/kubelet-sleeper:1"),
            runnable.runnable_recipe("example.test/was-used:1", payload_bytes=4 * MIB),
        ]
    )
    # Plain images: content only, so each takes its CRI size on disk. Distinct sizes.
    unused = node.load_images(
        [images.recipe(f"example.test/unused-{size}:1", layer_bytes=size * MIB, compress=False) for size in (6, 10, 14)]
    )
    (pinned,) = node.load_images([images.recipe("example.test/pinned:1", layer_bytes=8 * MIB, compress=False)])
    node.daemon.label_image(pinned.refs[0], {PIN_LABEL: "pinned"})
    cri.wait_for(node.address, lambda listed: any(i.id == pinned.image_id and i.pinned for i in listed))
    # A container the kubelet did not make counts as a user too.
    user = node.pods().container(was_used.refs[0], "running")
    return Scenario(sleeper, was_used, unused, pinned, user.pod.id)


def _start(node: KubeletNode, made: kubelet.Kubelet, scenario: Scenario) -> datetime.datetime:
    """Start the kubelet with the sleeper's static pod; once it has seen was-used in use, remove
    that user. Returns the stamp of the line where the kubelet first detected the images (written
    just after it took the time it records)."""
    pod = kubelet.StaticPod("sleeper", scenario.sleeper.refs[0])
    made.add_static_pod(pod)
    node.start(made)
    first_seen = made.line_time(made.wait_for_log(r'"Image ID is new"'))
    made.wait_for_log(r'"Setting Image ID lastUsed" imageID="%s"' % scenario.was_used.image_id)
    _remove_pod(node, scenario.user_pod)
    cri_pods.running_container(node.address, made.static_pod_name(pod))
    return first_seen


def test_image_gc_deletes_unused_images_in_order_and_keeps_the_used_and_the_pinned(
    kubelet_node: KubeletNode, record_property: Callable[[str, object], None]
) -> None:
    began = time.monotonic()
    scenario = _scenario(kubelet_node)
    made = kubelet_node.new_kubelet(
        gc=kubelet.GcPolicy(high_threshold_percent=20, low_threshold_percent=10, min_age=f"{MIN_AGE_S}s"),
        eviction_hard={"imagefs.available": f"{EVICTION_THRESHOLD // MIB}Mi"},
    )
    first_seen = _start(kubelet_node, made, scenario)
    # Past the minimum age at the next eviction check; "young" is first seen at that check.
    _sleep_until(first_seen + datetime.timedelta(seconds=MIN_AGE_S + 1))
    (young,) = kubelet_node.load_images([images.recipe("example.test/young:1", layer_bytes=2 * MIB, compress=False)])
    before_pressure = len(made.log_text())
    # Usage is above the high threshold, yet the periodic GC's first run (at start) deleted
    # nothing: it is the pass that first detects every image (and here fails before the threshold
    # step, its stats not ready yet). Its next run is 5 minutes away.
    assert _usage(kubelet_node) >= 20
    assert re.search(r"Image garbage collection (failed once|succeeded)", made.log_text()[:before_pressure])
    assert made.removals() == []

    _fill(kubelet_node.fs.path / "filler", kubelet_node.fs.available - (EVICTION_THRESHOLD - PRESSURE_MARGIN))
    removed = made.wait_for_removals(4, EVICTION_WAIT_S, since=before_pressure)
    made.wait_for_log("able to reduce resource pressure without evicting pods", since=before_pressure)
    seconds = time.monotonic() - began
    record_property("kubelet_gc_scenario_s", round(seconds, 1))
    print(f"image GC scenario: {seconds:.1f}s; removed in order: {[(r.at, r.image_id[:19], r.size) for r in removed]}")

    # Never-used images first (equal lastUsed and firstDetected: any order among them), then the
    # one the kubelet saw in use; every size is the CRI size.
    assert len(removed) == 4
    assert {(r.image_id, r.size) for r in removed[:3]} == {(info.image_id, info.size) for info in scenario.unused}
    assert (removed[3].image_id, removed[3].size) == (scenario.was_used.image_id, scenario.was_used.size)
    left = {image.id for image in cri.list_images(kubelet_node.address)}
    assert left == {scenario.sleeper.image_id, scenario.pinned.image_id, young.image_id, _pause_id(kubelet_node)}
    made.wait_for_log(r'minAge, not eligible for garbage collection" imageID="%s"' % young.image_id, since=before_pressure)

    # gcmodel fed what the kubelet recorded (times from its log) orders the deletions as it did.
    reclaim = made.wait_for_log(r'"Attempting to delete unused images"', since=before_pressure)
    now = made.line_time(reclaim)
    was_used_at = made.last_used(scenario.was_used.image_id, reclaim.start())
    assert was_used_at is not None and first_seen - LOG_STAMP_SLACK <= was_used_at < now
    records = [*scenario.records(first_seen, now, was_used_at), gcmodel.GcImage(young.image_id, young.size, now)]
    settings = gcmodel.GcSettings(20, 10, datetime.timedelta(seconds=MIN_AGE_S))
    # DeleteUnusedImages does not look at the filesystem.
    plan = gcmodel.plan_gc(records, [_sleeper_container(scenario)], settings, gcmodel.ImageFs(1, 0), now, mode="all_unused")
    deleted = [entry.image.id for entry in plan.deletions]
    assert set(deleted[:3]) == {r.image_id for r in removed[:3]} and deleted[3] == removed[3].image_id
    assert [entry.tie for entry in plan.deletions] == [True, True, True, False]
    assert {entry.image.id: entry.fate for entry in plan.order}[young.image_id] is gcmodel.Fate.TOO_YOUNG
    # pinctl's own estimate cannot know the kubelet saw was-used in use: it ties it with the others.
    observed = [gcestimate.ObservedImage(r.image_id, r.size, created_at=first_seen) for r in removed]
    assert {estimate.image.last_used for estimate in gcestimate.estimate_images(observed, [], now)} == {None}


def _sleeper_container(scenario: Scenario) -> gcmodel.GcContainer:
    # containerd 1.7 reports the image id as image_ref (it predates image_id).
    return gcmodel.GcContainer("sleeper", scenario.sleeper.image_id)


def _usage(node: KubeletNode) -> int:
    """The kubelet's integer usage of the imagefs, from statfs."""
    return 100 - node.fs.available * 100 // node.fs.capacity


def _remove_pod(node: KubeletNode, pod_id: str) -> None:
    """Stop and remove a harness pod (the kubelet may be killing it as an orphan at the same time)."""
    for call in (cri_pods.stop_pod_sandbox, cri_pods.remove_pod_sandbox):
        with contextlib.suppress(cri.CriError):
            call(node.address, pod_id)
    _wait_until(lambda: all(c.pod_sandbox_id != pod_id for c in cri_pods.list_containers(node.address)), "pod removed")


def _sleep_until(moment: datetime.datetime) -> None:
    time.sleep(max(0.0, (moment - datetime.datetime.now(datetime.timezone.utc)).total_seconds()))


def _pause_id(node: KubeletNode) -> str:
    (pause,) = [image for image in cri.list_images(node.address) if node.daemon.sandbox_image in image.repo_tags]
    return pause.id


def _fill(path: pathlib.Path, size: int) -> None:
    """Blocks allocated on the imagefs beside containerd's root: statfs counts them as used at once."""
    with open(path, "wb") as handle:
        os.posix_fallocate(handle.fileno(), 0, size)

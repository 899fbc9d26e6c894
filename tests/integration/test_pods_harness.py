"""The real-pods harness: containers in every state, the image filesystem, and RemoveImage's indifference.

All on ``containerd17_pods`` (containerd 1.7's CRI running pods with runc, host network, on a
256 MiB tmpfs); results are read back through the harness's own CRI client and statfs.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest

from pinctl.gc import model as gcmodel
from tests.harness import cri, cri_pods, images, pods, runnable
from tests.harness.pod_fixtures import PodNode

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
PIN_LABEL = "io.cri-containerd.pinned"
# The model takes the time as an input; every image here is long past the minimum age.
_NOW = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)
_LONG_AGO = _NOW - timedelta(days=1)


def test_containers_in_every_state_are_listed_with_their_image(pod_node: PodNode) -> None:
    (info,) = pod_node.load_runnable([runnable.runnable_recipe("example.test/states:1", payload_bytes=64 * 1024)])
    made = pod_node.pods()
    pod = made.pod()
    running = made.container(info.refs[0], "running", pod=pod)
    exited = made.container(info.refs[0], "exited", pod=pod)
    created = made.container(info.refs[0], "created", pod=pod)

    listed = {container.id: container for container in cri_pods.list_containers(pod_node.address)}
    assert {cid: listed[cid].state for cid in (running.id, exited.id, created.id)} == {
        running.id: "running", exited.id: "exited", created.id: "created",
    }
    for container in listed.values():
        assert container.pod_sandbox_id == pod.id
        assert container.image == info.refs[0]
        # containerd 1.7 reports the image id (config digest) as image_ref and predates image_id.
        assert container.image_ref == info.image_id
        assert container.image_id in ("", info.image_id)
    (sandbox,) = cri_pods.list_pod_sandboxes(pod_node.address)
    assert (sandbox.id, sandbox.name, sandbox.ready) == (pod.id, pod.name, True)


def test_container_status_times_follow_the_states(pod_node: PodNode) -> None:
    (info,) = pod_node.load_runnable([runnable.runnable_recipe("example.test/times:1")])
    made = pod_node.pods()
    exited = cri_pods.container_status(pod_node.address, made.container(info.refs[0], "exited").id)
    created = cri_pods.container_status(pod_node.address, made.container(info.refs[0], "created").id)
    running = cri_pods.container_status(pod_node.address, made.container(info.refs[0], "running").id)
    assert exited.state == "exited" and exited.exit_code == 0
    assert 0 < exited.created_at <= exited.started_at and exited.finished_at > exited.created_at
    assert created.started_at == 0 and created.finished_at == 0
    assert running.started_at >= running.created_at > 0 and running.finished_at == 0
    assert {exited.image_ref, created.image_ref, running.image_ref} == {info.image_id}


def test_stop_and_remove_a_container_then_its_pod(pod_node: PodNode) -> None:
    (info,) = pod_node.load_runnable([runnable.runnable_recipe("example.test/stop:1")])
    made = pod_node.pods()
    container = made.container(info.refs[0], "running")

    cri_pods.stop_container(pod_node.address, container.id, timeout_s=0)
    assert made.wait_for_state(container.id, "exited").image_ref == info.image_id
    cri_pods.remove_container(pod_node.address, container.id)
    assert container.id not in {c.id for c in cri_pods.list_containers(pod_node.address)}

    cri_pods.stop_pod_sandbox(pod_node.address, container.pod.id)
    assert [s.ready for s in cri_pods.list_pod_sandboxes(pod_node.address)] == [False]
    cri_pods.remove_pod_sandbox(pod_node.address, container.pod.id)
    assert cri_pods.list_pod_sandboxes(pod_node.address) == []


def test_five_pods_in_a_row_each_run_their_container(pod_node: PodNode,
                                                     record_property: Callable[[str, object], None]) -> None:
    """Made one after another, each pod and container is running at once and none replaces another;
    how long each took is recorded (a hang ends in wait_for_state's deadline), never asserted."""
    (info,) = pod_node.load_runnable([runnable.runnable_recipe("example.test/timed:1")])
    made = pod_node.pods()
    started = [made.container(info.refs[0], "running") for _ in range(5)]
    seconds = [container.seconds for container in started]
    record_property("pod_and_container_start_s", seconds)
    print(f"pod + running container: median {statistics.median(seconds):.3f}s, max {max(seconds):.3f}s")
    assert len({container.pod.id for container in started}) == 5
    running = {c.id for c in cri_pods.list_containers(pod_node.address) if c.state == "running"}
    assert {container.id for container in started} <= running


def test_image_fs_info_reports_the_dedicated_filesystem(pod_node: PodNode) -> None:
    before = cri_pods.settled_image_fs_info(pod_node.address)
    mount = os.statvfs(before.mountpoint)
    assert before.mountpoint.startswith(str(pod_node.fs.path) + "/")
    # What the kubelet reads for capacity and free space is the tmpfs, not the host's disk.
    assert mount.f_blocks * mount.f_frsize == pod_node.fs.capacity == pods.DEFAULT_FS_BYTES
    available_before = pod_node.fs.available

    payload = 24 * MIB
    pod_node.load_runnable([runnable.runnable_recipe("example.test/bulky:1", payload_bytes=payload)])

    after = cri_pods.settled_image_fs_info(pod_node.address, changed_from=before)
    # ImageFsInfo counts snapshots (the unpacked layer) only; statfs also sees the stored content.
    assert payload <= after.used_bytes - before.used_bytes < 2 * payload
    assert available_before - pod_node.fs.available >= 2 * payload
    usage = gcmodel.ImageFs(pod_node.fs.capacity, pod_node.fs.available).usage_percent
    assert usage == 100 - pod_node.fs.available * 100 // pods.DEFAULT_FS_BYTES >= 19


def test_remove_image_deletes_an_image_a_running_container_uses(pod_node: PodNode) -> None:
    (info,) = pod_node.load_runnable([runnable.runnable_recipe("example.test/in-use:1")])
    container = pod_node.pods().container(info.refs[0], "running")
    assert cri_pods.image_status(pod_node.address, info.refs[0]) is not None

    cri_pods.remove_image(pod_node.address, info.refs[0])

    assert cri_pods.image_status(pod_node.address, info.refs[0]) is None
    assert info.image_id not in {image.id for image in cri.list_images(pod_node.address)}
    (still,) = [c for c in cri_pods.list_containers(pod_node.address) if c.id == container.id]
    assert (still.state, still.image_ref) == ("running", info.image_id)


def test_remove_image_deletes_a_pinned_image(pod_node: PodNode) -> None:
    (info,) = pod_node.load_images([images.recipe("example.test/pinned:1", seed="pinned-by-label")])
    pod_node.daemon.label_image(info.refs[0], {PIN_LABEL: "pinned"})
    cri.wait_for(pod_node.address, lambda listed: any(i.id == info.image_id and i.pinned for i in listed))

    cri_pods.remove_image(pod_node.address, info.image_id)

    assert cri_pods.image_status(pod_node.address, info.refs[0]) is None
    assert info.refs[0] not in {row.ref for row in pod_node.daemon.images()}


def test_the_model_sees_real_containers_of_any_state_as_users(pod_node: PodNode) -> None:
    states: tuple[pods.WantedState, ...] = ("running", "exited", "created")
    recipes = [runnable.runnable_recipe(f"example.test/user-{state}:1") for state in states]
    recipes.append(runnable.runnable_recipe("example.test/unused:1"))
    infos = pod_node.load_runnable(recipes)
    made = pod_node.pods()
    for info, state in zip(infos, states):
        made.container(info.refs[0], state)

    listed_images = cri.list_images(pod_node.address)
    listed_containers = cri_pods.list_containers(pod_node.address)
    plan = gcmodel.plan_gc(
        [gcmodel.GcImage(i.id, i.size, _LONG_AGO, refs=i.repo_tags, pinned=i.pinned) for i in listed_images],
        [gcmodel.GcContainer(c.id, c.image_ref, c.state, c.image_id, c.image) for c in listed_containers],
        gcmodel.GcSettings(),
        gcmodel.ImageFs(pod_node.fs.capacity, pod_node.fs.available),
        _NOW,
        simulated_usage=99,
    )
    in_use = {p.image.id for p in plan.protected if gcmodel.Protection.IN_USE in p.reasons}
    assert in_use == {info.image_id for info in infos[:3]}
    # containerd 1.7 pins its sandbox image; nothing else protects it (the kubelet ignores sandboxes).
    assert [p.reasons for p in plan.protected if p.image.id not in in_use] == [(gcmodel.Protection.PINNED,)]
    assert [entry.image.id for entry in plan.deletions] == [infos[3].image_id]
    assert not plan.unmatched_containers

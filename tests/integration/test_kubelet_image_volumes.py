"""Image volumes (ImageVolume, CRI ``Mount.image``) on containerd 2.1, through the CRI alone.

A real container mounts an image: created with ``ContainerConfig.mounts[].image`` as the kubelet
creates one (by image ID), and another mounting an image by tag, as any CRI client may. The
kubelet (1.35+) counts a mount as a use of the image whose ID equals the mount's image; so
``pinctl gc plan`` protects the first and not the second, and ``pinctl prune`` keeps both and
deletes the image nothing mounts. The same through a real kubelet is the ``image_volume``
scenario of test_kubelet_gc.py.
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Iterator

import pytest

from tests.conftest import engine_unavailable
from tests.harness import cri, cri_pods, debs, images, kubelet, pods, runnable
from tests.harness.containerd import DaemonError
from tests.harness.protowire import Message, Reader, Value, encode
from tests.integration.pinctl_runner import pinctl

pytestmark = pytest.mark.integration

ENGINE = "containerd-2.1"
MIB = 1024 * 1024
MIN_AGE = "1s"


@pytest.fixture
def node(tmp_path: pathlib.Path) -> Iterator[pods.PodsDaemon]:
    """containerd 2.1 that runs pods, on a loop fs of its own (its images get deleted)."""
    try:
        context = kubelet.node_daemon(tmp_path, 128 * MIB, ENGINE)
        daemon, _fs = context.__enter__()
    except (runnable.PodsUnavailable, debs.EngineUnavailable, DaemonError, cri.CriError, OSError) as exc:
        engine_unavailable(f"{ENGINE} for pods unavailable: {exc}")
    try:
        yield daemon
    finally:
        context.__exit__(None, None, None)


def create_with_image_mount(address: str, pod: pods.Pod, name: str, image: str, mounted: str) -> str:
    """``CreateContainer`` whose ``ContainerConfig.mounts`` (7) holds one ``Mount``:
    container_path (1), readonly (3), image (9, an ``ImageSpec`` whose image is field 1)."""
    mount: Message = [(1, "/data"), (3, 1), (9, [(1, mounted)])]
    config: list[tuple[int, Value]] = [(1, [(1, name), (2, 0)]), (2, [(1, image)])]
    config += [(3, part) for part in pods.COMMANDS["running"]]
    config += [(7, mount), (11, f"{name}.log"), (15, [(2, [(3, [(1, cri_pods.NAMESPACE_NODE)])])])]
    request: Message = [(1, pod.id), (2, config), (3, pod.config)]
    return Reader(cri.unary_call(address, cri_pods.RUNTIME + "CreateContainer", encode(request))).text(1)


def mounted_images(address: str, container_id: str) -> list[str]:
    """``ContainerStatus.status.mounts[].image.image`` (fields 1, 14, 9, 1)."""
    status = Reader(cri.unary_call(address, cri_pods.RUNTIME + "ContainerStatus", encode([(1, container_id)]))).message(1)
    return [mount.message(9).text(1) for mount in status.messages(14) if mount.all_bytes(9)]


def test_an_image_mounted_as_a_volume_is_kept_by_gc_plan_and_prune(node: pods.PodsDaemon, tmp_path: pathlib.Path) -> None:
    sleeper, by_id, by_tag = runnable.load_runnable(node, tmp_path / "work", [
        runnable.runnable_recipe("example.test/iv-sleeper:1"),
        runnable.runnable_recipe("example.test/iv-data:1", payload_bytes=MIB),
        runnable.runnable_recipe("example.test/iv-tagged:1", payload_bytes=MIB),
    ])
    (plain,) = images.load_images(node, tmp_path / "work", [images.recipe("example.test/iv-plain:1", layer_bytes=MIB)])
    made = pods.Pods(node)
    pod = made.pod()
    first = create_with_image_mount(node.address, pod, "by-id", sleeper.refs[0], by_id.image_id)
    second = create_with_image_mount(node.address, pod, "by-tag", sleeper.refs[0], by_tag.refs[0])
    for container in (first, second):
        cri_pods.start_container(node.address, container)
        made.wait_for_state(container, "running")
    # containerd reports each mount's image as it was given.
    assert (mounted_images(node.address, first), mounted_images(node.address, second)) == ([by_id.image_id],
                                                                                          [by_tag.refs[0]])
    time.sleep(1.5)  # past the minimum age of 1s
    endpoint = f"unix://{node.address}"

    planned = pinctl(node, "gc", "plan", "-r", endpoint, "--min-age", MIN_AGE, "--usage", "99", "-o", "json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)["gc"]
    protected = {item["id"]: item for item in plan["protected"]}
    assert protected[by_id.image_id]["reasons"] == ["in_use"] and protected[by_id.image_id]["containers"] == ["by-id"]
    # As the kubelet: a mount naming an image by tag does not count.
    deleted = {entry["id"] for entry in plan["order"] if entry["deleted"]}
    assert deleted == {by_tag.image_id, plain.image_id}

    pruned = pinctl(node, "prune", "-r", endpoint, "--min-age", MIN_AGE, "--all-unused", "--yes", "-o", "json")
    assert pruned.returncode == 0, pruned.stderr
    actions = {item["id"]: (item["action"], item["why"]) for item in json.loads(pruned.stdout)["results"]}
    assert actions[plain.image_id] == ("removed", None)
    assert actions[by_id.image_id][0] == "kept" and "in use by by-id" in actions[by_id.image_id][1]
    assert actions[by_tag.image_id] == ("kept", "named by a container")
    left = {image.id for image in cri.list_images(node.address)}
    assert {by_id.image_id, by_tag.image_id, sleeper.image_id} <= left and plain.image_id not in left

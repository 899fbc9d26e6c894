"""Raw CRI calls for pods: sandboxes, containers and their status, ImageFsInfo, ImageStatus, RemoveImage.

The CRI calls encode and decode by field number (``tests/harness/protowire.py``), independent of
pinctl's .proto files, with the message and field names written next to each number.
``tests/harness/cri.py`` holds the transport (``unary_call``) and ``ListImages``; the pod and
container lifecycle built on these calls is ``tests/harness/pods.py``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
import uuid
from typing import Literal, Optional

from tests.harness import cri
from tests.harness.protowire import Message, Reader, Value, encode

RUNTIME = "/runtime.v1.RuntimeService/"
IMAGE = "/runtime.v1.ImageService/"
# NamespaceMode: POD = 0, CONTAINER = 1, NODE = 2, TARGET = 3.
NAMESPACE_NODE = 2
# ContainerState: CONTAINER_CREATED = 0, CONTAINER_RUNNING = 1, CONTAINER_EXITED = 2, CONTAINER_UNKNOWN = 3.
ContainerState = Literal["created", "running", "exited", "unknown"]
CONTAINER_STATES: dict[int, ContainerState] = {0: "created", 1: "running", 2: "exited", 3: "unknown"}
STATE_TIMEOUT_S = 30.0
# The ``stats_collect_period = 1`` that pods.PodsDaemon writes into every containerd config.
STATS_PERIOD_S = 1.0


# --- CRI calls ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CriContainer:
    """``runtime.v1.Container`` from ``ListContainers``."""

    id: str  # 1
    pod_sandbox_id: str  # 2
    name: str  # 3: ContainerMetadata.name (1)
    image: str  # 4: ImageSpec.image (1), what the container was created with
    image_ref: str  # 5
    state: ContainerState  # 6
    created_at: int  # 7, nanoseconds
    image_id: str  # 10 (CRI 1.30+; empty from runtimes that predate it)


@dataclasses.dataclass(frozen=True)
class CriContainerStatus:
    """The times and image fields of ``runtime.v1.ContainerStatus`` (``ContainerStatus``)."""

    id: str  # 1
    state: ContainerState  # 3
    created_at: int  # 4, nanoseconds
    started_at: int  # 5, nanoseconds, 0 = never started
    finished_at: int  # 6, nanoseconds, 0 = not finished
    exit_code: int  # 7
    image: str  # 8: ImageSpec.image
    image_ref: str  # 9
    image_id: str  # 17


@dataclasses.dataclass(frozen=True)
class CriSandbox:
    """``runtime.v1.PodSandbox`` from ``ListPodSandbox``."""

    id: str  # 1
    name: str  # 2: PodSandboxMetadata.name (1)
    ready: bool  # 3: SANDBOX_READY = 0


@dataclasses.dataclass(frozen=True)
class CriFsUsage:
    """``runtime.v1.FilesystemUsage`` from ``ImageFsInfo``."""

    timestamp: int  # 1, nanoseconds
    mountpoint: str  # 2: FilesystemIdentifier.mountpoint (1)
    used_bytes: int  # 3: UInt64Value.value (1)
    inodes_used: int  # 4: UInt64Value.value (1)


def _call(address: str, method: str, request: Message) -> Reader:
    return Reader(cri.unary_call(address, method, encode(request)))


def sandbox_config(name: str, log_dir: pathlib.Path) -> Message:
    """``PodSandboxConfig`` for a host-network pod (no hostname: the CRI allows none with NODE)."""
    metadata: Message = [(1, name), (2, uuid.uuid5(uuid.NAMESPACE_URL, name).hex), (3, "pinctl-test"), (4, 0)]
    namespaces: Message = [(1, NAMESPACE_NODE)]
    linux: Message = [(2, [(1, namespaces)])]  # LinuxPodSandboxConfig.security_context.namespace_options
    return [(1, metadata), (3, str(log_dir)), (8, linux)]


def run_pod_sandbox(address: str, config: Message) -> str:
    """``RunPodSandbox``: RunPodSandboxRequest.config (1); returns pod_sandbox_id (1)."""
    return _call(address, RUNTIME + "RunPodSandbox", [(1, config)]).text(1)


def create_container(
    address: str, pod_id: str, pod_config: Message, name: str, image: str, command: list[str]
) -> str:
    """``CreateContainer``: pod_sandbox_id (1), ContainerConfig (2), sandbox_config (3)."""
    config: list[tuple[int, Value]] = [(1, [(1, name), (2, 0)]), (2, [(1, image)])]
    config += [(3, part) for part in command]
    config += [(11, f"{name}.log"), (15, [(2, [(3, [(1, NAMESPACE_NODE)])])])]
    request: Message = [(1, pod_id), (2, config), (3, pod_config)]
    return _call(address, RUNTIME + "CreateContainer", request).text(1)


def start_container(address: str, container_id: str) -> None:
    _call(address, RUNTIME + "StartContainer", [(1, container_id)])


def stop_container(address: str, container_id: str, timeout_s: int = 0) -> None:
    _call(address, RUNTIME + "StopContainer", [(1, container_id), (2, timeout_s)])


def remove_container(address: str, container_id: str) -> None:
    _call(address, RUNTIME + "RemoveContainer", [(1, container_id)])


def stop_pod_sandbox(address: str, pod_id: str) -> None:
    _call(address, RUNTIME + "StopPodSandbox", [(1, pod_id)])


def remove_pod_sandbox(address: str, pod_id: str) -> None:
    _call(address, RUNTIME + "RemovePodSandbox", [(1, pod_id)])


def list_containers(address: str) -> list[CriContainer]:
    """``ListContainers`` with no filter: every container, any state (as the kubelet's GC asks)."""
    reply = _call(address, RUNTIME + "ListContainers", [])
    return [_container(item) for item in reply.messages(1)]


def _container(item: Reader) -> CriContainer:
    return CriContainer(
        id=item.text(1),
        pod_sandbox_id=item.text(2),
        name=item.message(3).text(1),
        image=item.message(4).text(1),
        image_ref=item.text(5),
        state=_state(item.integer(6)),
        created_at=item.integer(7),
        image_id=item.text(10),
    )


def _state(value: int) -> ContainerState:
    return CONTAINER_STATES.get(value, "unknown")


def container_status(address: str, container_id: str) -> CriContainerStatus:
    status = _call(address, RUNTIME + "ContainerStatus", [(1, container_id)]).message(1)
    return CriContainerStatus(
        id=status.text(1),
        state=_state(status.integer(3)),
        created_at=status.integer(4),
        started_at=status.integer(5),
        finished_at=status.integer(6),
        exit_code=status.integer(7),
        image=status.message(8).text(1),
        image_ref=status.text(9),
        image_id=status.text(17),
    )


def list_pod_sandboxes(address: str) -> list[CriSandbox]:
    reply = _call(address, RUNTIME + "ListPodSandbox", [])
    return [CriSandbox(item.text(1), item.message(2).text(1), item.integer(3) == 0) for item in reply.messages(1)]


def image_fs_info(address: str) -> list[CriFsUsage]:
    """``ImageFsInfo``: image_filesystems (1), each a FilesystemUsage."""
    reply = _call(address, IMAGE + "ImageFsInfo", [])
    return [
        CriFsUsage(
            timestamp=fs.integer(1),
            mountpoint=fs.message(2).text(1),
            used_bytes=fs.message(3).integer(1),
            inodes_used=fs.message(4).integer(1),
        )
        for fs in reply.messages(1)
    ]


def fresh_image_fs_info(address: str, timeout: float = STATE_TIMEOUT_S) -> CriFsUsage:
    """The first image filesystem's usage from a stats sync that began after this call.

    containerd refreshes snapshot usage every ``stats_collect_period`` (1 s here) and answers
    ``ImageFsInfo`` from that cache, with the cache's timestamp.
    """
    asked_at = time.time_ns()
    deadline = time.monotonic() + timeout
    while True:
        usage = image_fs_info(address)[0]
        if usage.timestamp >= asked_at:
            return usage
        if time.monotonic() > deadline:
            raise cri.CriError(f"ImageFsInfo not refreshed in {timeout}s (last at {usage.timestamp})")
        time.sleep(0.1)


def settled_image_fs_info(address: str, timeout: float = STATE_TIMEOUT_S,
                          changed_from: Optional[CriFsUsage] = None) -> CriFsUsage:
    """Fresh usage once two syncs over a stats period apart agree; with ``changed_from``, once
    it differs from that reading too.

    Deleted snapshots are removed in the background, and new ones reach the CRI's cache only at
    its next walk of the snapshotter. Until then an empty cache answers 0 bytes stamped "now",
    which looks fresh: the spacing gives a walk the time to come between two readings, and a
    caller that knows usage must change (it just unpacked an image) says so, which is the order
    it waits for.
    """
    deadline = time.monotonic() + timeout
    previous = fresh_image_fs_info(address, timeout)
    while True:
        time.sleep(STATS_PERIOD_S * 1.5)
        current = fresh_image_fs_info(address, timeout)
        if changed_from is not None and current.used_bytes == changed_from.used_bytes:
            if time.monotonic() > deadline:
                raise cri.CriError(f"ImageFsInfo still says {current.used_bytes} bytes after {timeout}s")
            previous = current
            continue
        if (current.used_bytes, current.inodes_used) == (previous.used_bytes, previous.inodes_used):
            return current
        if time.monotonic() > deadline:
            raise cri.CriError(f"ImageFsInfo still changing after {timeout}s")
        previous = current


def pull_image(address: str, image: str) -> str:
    """``PullImage``: PullImageRequest.image (1) is an ImageSpec whose image (1) is the ref;
    returns image_ref (1), the image ID. What the kubelet, and the CRI itself for a missing
    sandbox image, call."""
    return _call(address, IMAGE + "PullImage", [(1, [(1, image)])]).text(1)


def remove_image(address: str, image: str) -> None:
    """``RemoveImage``: RemoveImageRequest.image (1) is an ImageSpec whose image (1) is a ref or id."""
    _call(address, IMAGE + "RemoveImage", [(1, [(1, image)])])


def image_status(address: str, image: str) -> Optional[cri.CriImage]:
    """``ImageStatus``: None when the CRI says the image is absent (an empty ``image`` field)."""
    reply = _call(address, IMAGE + "ImageStatus", [(1, [(1, image)])])
    if not reply.all_bytes(1):
        return None
    found = reply.message(1)
    return cri.CriImage(
        id=found.text(1),
        repo_tags=tuple(found.texts(2)),
        repo_digests=tuple(found.texts(3)),
        size=found.integer(4),
        pinned=bool(found.integer(8)),
    )


def running_container(address: str, sandbox_name: str, timeout: float = STATE_TIMEOUT_S) -> CriContainer:
    """The running container in the pod sandbox of that name (a kubelet's static pod), once it runs."""
    deadline = time.monotonic() + timeout
    while True:
        sandboxes = {sandbox.id: sandbox for sandbox in list_pod_sandboxes(address)}
        for container in list_containers(address):
            sandbox = sandboxes.get(container.pod_sandbox_id)
            if sandbox is not None and sandbox.name == sandbox_name and container.state == "running":
                return container
        if time.monotonic() > deadline:
            raise AssertionError(f"no running container in {sandbox_name} after {timeout}s")
        time.sleep(0.1)

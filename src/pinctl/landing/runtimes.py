"""The runtimes images land in: the CRI runtime (Kubernetes' images, namespace k8s.io; none on
CRI-O) or Docker's API (namespace moby), and which of them a command's -n names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, Sequence

from pinctl.backends import procfs
from pinctl.errors import EngineError
from pinctl.model import CRI_NAMESPACE, DOCKER_NAMESPACE, RUNTIME_CRIO
from pinctl.node.imagefs import statfs

if TYPE_CHECKING:
    from pinctl.backends.cri import CriRuntime, RuntimeVersion
    from pinctl.backends.docker import DockerEngine
    from pinctl.backends.registry_auth import RegistryAuth
    from pinctl.gc.model import ImageFs
    from pinctl.node.sources import Node


class CriTarget:
    def __init__(self, runtime: CriRuntime, version: RuntimeVersion) -> None:
        self.runtime = runtime
        self.name = f"{version} at {runtime.endpoint}"
        # CRI-O keeps no namespaces: its images are in none ("" here, null in JSON).
        self.namespace = "" if version.name == RUNTIME_CRIO else CRI_NAMESPACE
        self._reached: dict[str, str] = {}  # each reported mount point, as reached from here

    def present(self, ref: str) -> bool:
        return self.runtime.image_status(ref) is not None

    def pull(self, ref: str, auth: Optional[RegistryAuth], timeout: float, cancelled: Callable[[], bool]) -> str:
        return self.runtime.pull_image(ref, auth, timeout, cancelled)

    def filesystem(self) -> ImageFs:
        filesystems = self.runtime.image_fs_info()
        if not filesystems:
            raise EngineError(f"{self.name} reports no image filesystem (ImageFsInfo)", "is this a CRI runtime?")
        # The mount point as the runtime sees it: one in a mount namespace of its own (a node's,
        # a unit's private mounts) is reached through its /proc/PID/root, as gc plan reads it.
        # Worked out once per run: the budget reads the filesystem before every pull.
        reported = filesystems[0].mountpoint
        if reported not in self._reached:
            self._reached[reported] = procfs.as_served(self.runtime.endpoint, reported)
        return statfs(self._reached[reported], "the CRI's ImageFsInfo mount point")


class DockerTarget:
    def __init__(self, engine: DockerEngine) -> None:
        self.engine = engine
        self.name = f"Docker at {engine.host}"
        self.namespace = DOCKER_NAMESPACE
        self._root = ""

    def present(self, ref: str) -> bool:
        return self.engine.image_present(ref) is not None

    def pull(self, ref: str, auth: Optional[RegistryAuth], timeout: float, cancelled: Callable[[], bool]) -> str:
        return self.engine.pull_image(ref, auth, timeout, cancelled)

    def filesystem(self) -> ImageFs:
        self._root = self._root or self.engine.root_dir_here()
        return statfs(self._root, "Docker's data root")


def docker_destination(node: Node, namespaces: Sequence[str], verb: str) -> Optional[DockerEngine]:
    """Docker's engine when the images go there (-n moby, or a node where only Docker answers);
    None when they go through the CRI. verb says what goes through Docker's API (pulls, imports)."""
    engine = node.docker_engine()
    if set(namespaces) == {DOCKER_NAMESPACE} or (not node.selected_namespaces() and engine is not None):
        if engine is None:
            raise EngineError(f"Docker is not answering: -n moby {verb} through Docker's API",
                              "start dockerd, or set --docker-host")
        return engine
    return None

"""pytest fixtures for a real kubelet: the cached binary, and a node of a test's own to run it on.

Registered in tests/conftest.py. ``kubelet_binary`` builds the kubelet once per machine (minutes,
the first time) and is shared by the session. ``kubelet_node`` is per test: a pod-capable
containerd 1.7 whose root is on a fresh loop-mounted ext4 (the kubelet's imagefs, so its
percentages are real and no other test's images count), and a factory for kubelets talking to
it, each stopped when the test ends. A kubelet kills pods it did not create and deletes images,
so it never shares the session's daemons.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterator, Mapping
from typing import Optional

import pytest

from tests.harness import cri, debs, images, kubelet, kubernetes_build, pods, runnable
from tests.harness.containerd import DaemonError
from tests.harness.pod_fixtures import _unavailable
from tests.harness.runnable import RunnableRecipe

ENGINE = "containerd-1.7"
# Room for a few images of several MiB each and their unpacked copies (native snapshotter).
NODE_FS_BYTES = 192 * 1024 * 1024


@dataclasses.dataclass
class KubeletNode:
    """A containerd of the test's own on its :class:`kubelet.LoopFs`, and the kubelets started on it."""

    daemon: pods.PodsDaemon
    fs: kubelet.LoopFs
    base_dir: pathlib.Path
    build: kubernetes_build.KubeletBuild
    kubelets: list[kubelet.Kubelet] = dataclasses.field(default_factory=list)

    @property
    def address(self) -> str:
        return self.daemon.address

    @property
    def work_dir(self) -> pathlib.Path:
        return self.base_dir / "work"

    def pods(self) -> pods.Pods:
        return pods.Pods(self.daemon)

    def load_runnable(self, recipes: list[RunnableRecipe]) -> list[images.ImageInfo]:
        return runnable.load_runnable(self.daemon, self.work_dir, recipes)

    def load_images(self, recipes: list[images.ImageRecipe]) -> list[images.ImageInfo]:
        """Plain images (content only, no snapshot): their CRI size is all they take on disk."""
        return images.load_images(self.daemon, self.work_dir, recipes, cri.NAMESPACE)

    def new_kubelet(
        self,
        *,
        gc: kubelet.GcPolicy = kubelet.GcPolicy(),
        eviction_hard: Optional[Mapping[str, str]] = None,
        runtime_endpoint: str = "",
        extra_config: Optional[Mapping[str, object]] = None,
    ) -> kubelet.Kubelet:
        """A kubelet for this node (not started yet); ``runtime_endpoint`` defaults to containerd's
        socket (a proxy's socket in front of it works the same)."""
        made = kubelet.Kubelet(
            self.base_dir / f"kubelet-{len(self.kubelets)}",
            runtime_endpoint or self.address,
            gc=gc,
            eviction_hard=eviction_hard,
            extra_config=extra_config,
            binary=self.build.binary,
        )
        self.kubelets.append(made)
        return made

    def start(self, made: kubelet.Kubelet) -> kubelet.Kubelet:
        """Start a kubelet; one that cannot run here skips the test locally and fails it in CI."""
        try:
            return made.start()
        except kubelet.KubeletError as exc:
            _unavailable(f"kubelet {self.build.version} does not run here: {exc}")


@pytest.fixture(scope="session")
def kubelet_binary() -> kubernetes_build.KubeletBuild:
    """The kubelet of :data:`kubernetes_build.KUBERNETES_VERSION`, built with the go command once per machine."""
    try:
        return kubernetes_build.ensure_kubelet()
    except kubernetes_build.KubeletUnavailable as exc:
        _unavailable(f"kubelet {kubernetes_build.KUBERNETES_VERSION} unavailable: {exc}")


@pytest.fixture
def kubelet_node(kubelet_binary: kubernetes_build.KubeletBuild, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeletNode]:
    """containerd 1.7 on a 192 MiB ext4 of this test's own; kubelets made on it stop after the test."""
    base = tmp_path_factory.mktemp("kubelet-node")
    try:
        context = kubelet.node_daemon(base, NODE_FS_BYTES, ENGINE)
        daemon, fs = context.__enter__()
    except (runnable.PodsUnavailable, debs.EngineUnavailable, DaemonError, cri.CriError, OSError) as exc:
        _unavailable(f"{ENGINE} for a kubelet unavailable: {exc}")
    node = KubeletNode(daemon, fs, base, kubelet_binary)
    try:
        yield node
    finally:
        # Kubelets first: a running one would restart the pods the daemon's teardown removes.
        for made in node.kubelets:
            made.stop()
        context.__exit__(None, None, None)

"""pytest fixtures for real pods: a pod-capable containerd 1.7 on its own small filesystem.

Registered in tests/conftest.py. ``containerd17_pods`` is one daemon for the whole session
(separate from ``containerd17``, whose config stays as it is); ``pod_node`` hands a test that
daemon with no pods and only the sandbox image, and removes the test's pods afterwards.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Iterator
from typing import NoReturn

import pytest

from tests.harness import cri, debs, images, pods
from tests.harness.containerd import DaemonError
from tests.harness.pods import RunnableRecipe

ENGINE = "containerd-1.7"


@dataclasses.dataclass
class PodNode:
    """A pod-capable daemon, its dedicated image filesystem, and a scratch dir for archives."""

    daemon: pods.PodsDaemon
    fs: pods.DedicatedFs
    work_dir: pathlib.Path

    @property
    def address(self) -> str:
        return self.daemon.address

    def pods(self) -> pods.Pods:
        return pods.Pods(self.daemon)

    def load_runnable(self, recipes: list[RunnableRecipe]) -> list[images.ImageInfo]:
        return pods.load_runnable(self.daemon, self.work_dir, recipes)

    def load_images(self, recipes: list[images.ImageRecipe], *, unpack: bool = False) -> list[images.ImageInfo]:
        """Plain (not runnable) images from ``tests/harness/images.py``."""
        return images.load_images(self.daemon, self.work_dir, recipes, cri.NAMESPACE, unpack=unpack)

    def reset(self) -> PodNode:
        """No pods, no containers, only the (runnable) sandbox image in ``k8s.io``."""
        self.pods().cleanup()
        self.daemon.clear_images(cri.NAMESPACE)
        pods.ensure_runnable_sandbox_image(self.daemon)
        return self


def _unavailable(reason: str) -> NoReturn:
    # As tests/conftest.py's engine_unavailable: skip locally, fail in CI.
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def containerd17_pods(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodNode]:
    """containerd 1.7 whose CRI runs pods (runc, host network) on a 256 MiB tmpfs, for the session."""
    base = tmp_path_factory.mktemp("pods")
    try:
        context = pods.pods_daemon(ENGINE, base)
        daemon, fs = context.__enter__()
    except (pods.PodsUnavailable, debs.EngineUnavailable, DaemonError, cri.CriError, OSError) as exc:
        _unavailable(f"{ENGINE} with pods unavailable: {exc}")
    try:
        yield PodNode(daemon, fs, base / "work")
    finally:
        context.__exit__(None, None, None)


@pytest.fixture
def pod_node(containerd17_pods: PodNode) -> Iterator[PodNode]:
    """The session's pod-capable daemon, reset; the test's pods are removed afterwards."""
    yield containerd17_pods.reset()
    if containerd17_pods.daemon.is_alive():
        containerd17_pods.pods().cleanup()


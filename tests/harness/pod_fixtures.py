"""pytest fixtures for real pods: pod-capable containerd 1.7, 2.1 and 2.4.2, each on its own small filesystem.

Registered in tests/conftest.py. ``containerd17_pods``, ``containerd21_pods`` and
``containerd24_pods`` are one daemon each for the whole session (separate from
``containerd17``/``containerd21``/``containerd24``, whose configs stay as they are; 2.1 and 2.4
get their 2.x pod settings from ``containerd.with_pod_settings_v3``, which config version 4
keeps in the same CRI tables). ``pod_node`` hands a test the 1.7 one with no pods and only the
sandbox image, and removes the test's pods afterwards; ``modern_pod_node`` does the same on 1.7,
then on 2.1, then on 2.4.2.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Iterator
from typing import NoReturn

import pytest

from tests.harness import cri, debs, engines, images, pods, runnable
from tests.harness.containerd import DaemonError
from tests.harness.runnable import RunnableRecipe

ENGINE = "containerd-1.7"
ENGINE_21 = "containerd-2.1"
# Session fixture -> test id, for the tests that run on both.
MODERN_PODS = {"containerd17_pods": "ctd17", "containerd21_pods": "ctd21", "containerd24_pods": "ctd24"}


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
        return runnable.load_runnable(self.daemon, self.work_dir, recipes)

    def load_images(self, recipes: list[images.ImageRecipe], *, unpack: bool = False) -> list[images.ImageInfo]:
        """Plain (not runnable) images from ``tests/harness/images.py``."""
        return images.load_images(self.daemon, self.work_dir, recipes, cri.NAMESPACE, unpack=unpack)

    def reset(self) -> PodNode:
        """No pods, no containers, only the (runnable) sandbox image in ``k8s.io``."""
        self.pods().cleanup()
        self.daemon.clear_images(cri.NAMESPACE)
        runnable.ensure_runnable_sandbox_image(self.daemon)
        return self


def _unavailable(reason: str) -> NoReturn:
    # As tests/conftest.py's engine_unavailable: skip locally, fail in CI.
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _session_pods(engine: str, factory: pytest.TempPathFactory) -> Iterator[PodNode]:
    base = factory.mktemp(f"pods-{engine}")
    try:
        context = pods.pods_daemon(engine, base)
        daemon, fs = context.__enter__()
    except (runnable.PodsUnavailable, debs.EngineUnavailable, DaemonError, cri.CriError, OSError) as exc:
        _unavailable(f"{engine} with pods unavailable: {exc}")
    try:
        yield PodNode(daemon, fs, base / "work")
    finally:
        context.__exit__(None, None, None)


def _for_one_test(node: PodNode) -> Iterator[PodNode]:
    yield node.reset()
    if node.daemon.is_alive():
        node.pods().cleanup()


@pytest.fixture(scope="session")
def containerd17_pods(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodNode]:
    """containerd 1.7 whose CRI runs pods (runc, host network) on a 256 MiB tmpfs, for the session."""
    yield from _session_pods(ENGINE, tmp_path_factory)


@pytest.fixture(scope="session")
def containerd21_pods(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodNode]:
    """containerd 2.1 running pods the same way (config version 3), for the session."""
    yield from _session_pods(ENGINE_21, tmp_path_factory)


@pytest.fixture(scope="session")
def containerd24_pods(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodNode]:
    """containerd 2.4.2 (built with the go command, its shim beside it) running pods the same
    way (config version 4), for the session."""
    yield from _session_pods(engines.CONTAINERD_24, tmp_path_factory)


@pytest.fixture
def pod_node(containerd17_pods: PodNode) -> Iterator[PodNode]:
    """The session's pod-capable containerd 1.7, reset; the test's pods are removed afterwards."""
    yield from _for_one_test(containerd17_pods)


@pytest.fixture(params=list(MODERN_PODS), ids=list(MODERN_PODS.values()))
def modern_pod_node(request: pytest.FixtureRequest) -> Iterator[PodNode]:
    """The pod-capable containerd 1.7, then 2.1, then 2.4.2, each reset as ``pod_node`` is."""
    yield from _for_one_test(request.getfixturevalue(request.param))

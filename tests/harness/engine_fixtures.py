"""pytest fixtures for the engines beyond containerd 1.6/1.7 and dockerd 26 (``engines.ENGINES``).

Registered in tests/conftest.py with one import line. All are session-scoped and shared, and
each engine is fetched or built at most once per machine (the engine cache), so only the
first run on a machine pays for them (see docs/development.md for how long that takes):

- ``containerd21``: containerd 2.1 (Debian sid), CRI enabled, its data on tmpfs when there is one;
- ``containerd24``: containerd 2.4.2 (config version 4), built from its Go module, the same way;
  its config imports ``conf.d/*.toml`` below its base directory (``daemon.conf_d``);
- ``crictl``: the path of crictl (cri-tools), built with the go command;
- ``cri_dockerd_043``: cri-dockerd v0.4.3 (no pin selectors) in front of the session's
  ``dockerd_containerd_store``.

An engine that cannot be had skips locally and fails with CI=true, as in tests/conftest.py.
The releases of cri-dockerd with pin selectors (v0.4.7 and later) are not served here (the
table marks them ``unavailable``): no test asks for them, since a skip in CI is a failure.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from typing import NoReturn

import pytest

from tests.harness import cri, debs, docker, engines, gobuild, images
from tests.harness.containerd import ContainerdDaemon, DaemonError
from tests.harness.cri_dockerd import CriDockerd
from tests.harness.docker import DockerDaemon

CONTAINERD_21 = "containerd-2.1"
_UNAVAILABLE: tuple[type[BaseException], ...] = (debs.EngineUnavailable, DaemonError, cri.CriError, OSError)
_CRI_DOCKERD_UNAVAILABLE: tuple[type[BaseException], ...] = (*_UNAVAILABLE, subprocess.SubprocessError)


def _unavailable(reason: str) -> NoReturn:
    # As tests/conftest.py's engine_unavailable: skip locally, fail in CI.
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _tmpfs_dir(name: str) -> pathlib.Path | None:
    shm = pathlib.Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        return None
    return pathlib.Path(tempfile.mkdtemp(prefix=f"pinctl-{name}-", dir=shm))


@pytest.fixture(scope="session")
def containerd21(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerdDaemon]:
    """containerd 2.1 (Debian sid), CRI enabled (config version 3), running for the whole session."""
    yield from _session_containerd(CONTAINERD_21, tmp_path_factory)


@pytest.fixture(scope="session")
def containerd24(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerdDaemon]:
    """containerd 2.4.2 built with the go command, CRI enabled (config version 4, importing
    ``conf.d/*.toml``), running for the whole session. A test that changes its conf.d restarts
    it and puts conf.d back (and restarts) when done."""
    yield from _session_containerd(engines.CONTAINERD_24, tmp_path_factory)


def _session_containerd(engine: str, factory: pytest.TempPathFactory) -> Iterator[ContainerdDaemon]:
    data_dir = _tmpfs_dir(engine)
    try:
        # gobuild's GoBuildError is an EngineUnavailable: a build that fails fails CI.
        daemon = ContainerdDaemon(engine, factory.mktemp(engine), data_dir=data_dir).start()
        images.ensure_sandbox_image(daemon)
    except _UNAVAILABLE as exc:
        if data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
        _unavailable(f"{engine} unavailable: {exc}")
    try:
        yield daemon
    finally:
        daemon.stop()
        if data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)


def go_binary(name: str) -> pathlib.Path:
    """A Go engine's binary, built on first use; skips (or fails in CI) when it cannot be had."""
    try:
        return gobuild.binary(name)
    except debs.EngineUnavailable as exc:
        _unavailable(f"{name} unavailable: {exc}")


@pytest.fixture(scope="session")
def crictl() -> pathlib.Path:
    """Path of crictl (cri-tools); use it through ``tests.harness.crictl.Crictl``."""
    return go_binary(engines.CRICTL)


def _session_cri_dockerd(
    engine: str,
    request: pytest.FixtureRequest,
    base: pathlib.Path,
    pinned_images: tuple[str, ...] = (),
    pinned_image_labels: tuple[str, ...] = (),
) -> Iterator[CriDockerd]:
    # The binary first: an engine that cannot be had skips before dockerd is started for it.
    go_binary(engine)
    docker: DockerDaemon = request.getfixturevalue("dockerd_containerd_store")
    try:
        daemon = CriDockerd(
            engine, docker, base, pinned_images=pinned_images, pinned_image_labels=pinned_image_labels
        ).start()
    except _CRI_DOCKERD_UNAVAILABLE as exc:
        _unavailable(f"{engine} unavailable: {exc}")
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope="session")
def cri_dockerd_043(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CriDockerd]:
    """cri-dockerd v0.4.3 (no pin selectors: it pins its sandbox image only) before ``dockerd_containerd_store``."""
    yield from _session_cri_dockerd(engines.CRI_DOCKERD_OLD, request, tmp_path_factory.mktemp("cdd043"))


LoadDocker = Callable[..., list[images.ImageInfo]]


@pytest.fixture
def docker_images(dockerd_containerd_store: DockerDaemon, tmp_path: pathlib.Path) -> Iterator[LoadDocker]:
    """Factory: ``docker_images(recipes)`` loads them into the shared dockerd; removed afterwards."""
    loaded: list[str] = []

    def load(recipes: list[images.ImageRecipe]) -> list[images.ImageInfo]:
        infos = docker.load_images_docker(dockerd_containerd_store, tmp_path / "archives", recipes)
        loaded.extend(ref for info in infos for ref in info.refs)
        return infos

    yield load
    if loaded and dockerd_containerd_store.is_alive():
        dockerd_containerd_store.docker("image", "rm", "--force", *loaded, check=False)

"""Shared pytest fixtures: real containerd daemons and images to put in them.

Daemons are session-scoped (one per engine per run); tests get a clean image
set through the ``clean_k8s_io``/``fresh_namespace`` factories, the ``containerd``
fixture, which runs a test once per engine with ``k8s.io`` reset, or ``modern_containerd``,
which does the same on the releases whose CRI honours pin labels (1.7, 2.1 and 2.4.2).
"""

from __future__ import annotations

import functools
import itertools
import os
import pathlib
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import NoReturn, Protocol, TypeVar

import pytest

# Keeps ``tests.harness`` importable under --import-mode=importlib too.
_ROOT = str(pathlib.Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.harness import cri, debs, images, work_units  # noqa: E402
from tests.harness.containerd import ContainerdDaemon, DaemonError  # noqa: E402
from tests.harness.engine_fixtures import containerd21, containerd24, cri_dockerd_043, crictl, docker_images  # noqa: E402, F401  (more engines)
from tests.harness.crio_fixtures import crio, crio_crictl, crio_registry  # noqa: E402, F401  (CRI-O)
from tests.harness.kubelet_fixtures import kubelet_binary, kubelet_node  # noqa: E402, F401  (a real kubelet)
from tests.harness.cluster_fixtures import agent_image, control_plane, etcd_binary, fleet, kubernetes_binaries  # noqa: E402, F401  (a real control plane, its nodes, the agent image)
from tests.harness.prometheus import prometheus3, prometheus3_build  # noqa: E402, F401  (Prometheus 3)
from tests.harness.pod_fixtures import containerd17_pods, containerd21_pods, containerd24_pods, modern_pod_node, pod_node  # noqa: E402, F401  (real pods)

ENGINE_IDS = {"containerd-1.7": "ctd17", "containerd-1.6": "ctd16"}
# The releases whose CRI honours the pin label, by session fixture: 2.x reads a config of
# another schema and pins its own pinned_images, so every test of pinctl against a CRI that
# honours labels runs on both.
MODERN_CONTAINERD = {"containerd17": "ctd17", "containerd21": "ctd21", "containerd24": "ctd24"}
_namespace_counter = itertools.count()
# The environment variables pytest_configure set to directories of the suite's own.
SUITE_DIRS_MARK = "PINCTL_TEST_SUITE_DIRS"


class _Daemon(Protocol):
    def stop(self) -> None: ...


T = TypeVar("T", bound=_Daemon)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "integration: runs real container engines (needs root and the Debian mirror)"
    )
    # pinctl keeps what image manifests resolve to in a file (backends/targets.py): every pinctl
    # the suite runs shares the suite's own, as a node's runs share theirs, and never the
    # machine's /var/cache/pinctl. Tests of the cache itself name their own.
    # Likewise the deletion journal: a watcher or cri-proxy started without a history_dir of its
    # own writes the suite's, never the machine's /var/lib/pinctl/history. Under pytest-xdist each
    # worker makes its own (the variables the controller made are marked, and replaced), so a
    # test that reads the journal sees only what its own worker's tests wrote.
    suite_made = set(os.environ.get(SUITE_DIRS_MARK, "").split(","))
    for variable, prefix in (("PINCTL_CACHE_DIR", "pinctl-test-cache-"), ("PINCTL_HISTORY_DIR", "pinctl-test-history-")):
        if variable in os.environ and variable not in suite_made:
            continue
        os.environ[variable] = tempfile.mkdtemp(prefix=prefix)
        config.add_cleanup(functools.partial(_remove_suite_dir, variable, os.environ[variable]))
        suite_made.add(variable)
    os.environ[SUITE_DIRS_MARK] = ",".join(sorted(suite_made - {""}))


def _remove_suite_dir(variable: str, path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if os.environ.get(variable) == path:
        del os.environ[variable]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Everything under tests/integration is integration, marked or not, so
    # `-m "not integration"` reliably gives the fast unit suite.
    integration_dir = pathlib.Path(__file__).parent / "integration"
    for item in items:
        if integration_dir in item.path.parents:
            item.add_marker(pytest.mark.integration)
    if hasattr(config, "workerinput"):
        # A pytest-xdist worker: the units of work longest first (sorted() is stable, so within a
        # unit, and among units of one rank, the collected order stays). Every worker sorts alike.
        items[:] = sorted(items, key=lambda item: work_units.rank(work_units.unit_of(item.nodeid)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    return work_units.make_scheduler(config, log)


def engine_unavailable(reason: str) -> NoReturn:
    """Skip locally, but fail in CI: a skipped engine there would hide a broken harness."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _fast_data_dir(engine: str) -> pathlib.Path | None:
    """A tmpfs directory for the daemon's root/state, when there is one (imports ~2x faster)."""
    shm = pathlib.Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        return None
    return pathlib.Path(tempfile.mkdtemp(prefix=f"pinctl-{engine}-", dir=shm))


def _session_engine(
    name: str, start: Callable[[pathlib.Path | None], T], errors: tuple[type[BaseException], ...]
) -> Iterator[T]:
    """A daemon for the whole session, its data on tmpfs when there is one; unavailable
    engines skip locally and fail in CI."""
    data_dir = _fast_data_dir(name)
    unavailable: tuple[type[BaseException], ...] = (debs.EngineUnavailable, DaemonError, OSError, *errors)
    try:
        daemon = start(data_dir)
    except unavailable as exc:
        if data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
        engine_unavailable(f"{name} unavailable: {exc}")
    try:
        yield daemon
    finally:
        daemon.stop()
        if data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)


def _session_daemon(engine: str, factory: pytest.TempPathFactory) -> Iterator[ContainerdDaemon]:
    def start(data_dir: pathlib.Path | None) -> ContainerdDaemon:
        daemon = ContainerdDaemon(engine, factory.mktemp(engine), data_dir=data_dir).start()
        images.ensure_sandbox_image(daemon)
        return daemon

    yield from _session_engine(engine, start, (cri.CriError,))


@pytest.fixture(scope="session")
def containerd17(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerdDaemon]:
    """containerd 1.7 (Debian trixie), CRI enabled, running for the whole session."""
    yield from _session_daemon("containerd-1.7", tmp_path_factory)


@pytest.fixture(scope="session")
def containerd16(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerdDaemon]:
    """containerd 1.6 (Debian bookworm), CRI enabled, running for the whole session."""
    yield from _session_daemon("containerd-1.6", tmp_path_factory)


def reset_k8s_io(daemon: ContainerdDaemon) -> ContainerdDaemon:
    """Empty ``k8s.io`` and re-import a pristine sandbox image (as CRI just adopted it)."""
    daemon.clear_images(cri.NAMESPACE)
    images.ensure_sandbox_image(daemon)
    return daemon


@pytest.fixture
def clean_k8s_io() -> Callable[[ContainerdDaemon], ContainerdDaemon]:
    """Factory: ``clean_k8s_io(daemon)`` leaves only the sandbox image in ``k8s.io``."""
    return reset_k8s_io


@pytest.fixture(params=list(ENGINE_IDS), ids=list(ENGINE_IDS.values()))
def containerd(request: pytest.FixtureRequest) -> ContainerdDaemon:
    """Each engine in turn, with ``k8s.io`` holding only the sandbox image."""
    fixture = {"containerd-1.7": "containerd17", "containerd-1.6": "containerd16"}[request.param]
    daemon: ContainerdDaemon = request.getfixturevalue(fixture)
    return reset_k8s_io(daemon)


# For a test of pinctl's own behaviour that only needs some containerd to talk to: 1.7 alone.
one_containerd = pytest.mark.parametrize("modern_containerd", ["containerd17"], ids=["ctd17"], indirect=True)


@pytest.fixture(params=list(MODERN_CONTAINERD), ids=list(MODERN_CONTAINERD.values()))
def modern_containerd(request: pytest.FixtureRequest) -> ContainerdDaemon:
    """containerd 1.7, then 2.1, then 2.4.2 (the session's daemons), with ``k8s.io`` holding only the sandbox image."""
    daemon: ContainerdDaemon = request.getfixturevalue(request.param)
    return reset_k8s_io(daemon)


@pytest.fixture
def fresh_namespace() -> Iterator[Callable[[ContainerdDaemon], str]]:
    """Factory: a new, empty, uniquely named namespace on a daemon; removed after the test."""
    created: list[tuple[ContainerdDaemon, str]] = []

    def make(daemon: ContainerdDaemon) -> str:
        name = f"pinctl-test-{os.getpid()}-{next(_namespace_counter)}"
        daemon.ctr("namespaces", "create", name, namespace=name)
        created.append((daemon, name))
        return name

    yield make
    for daemon, name in created:
        if daemon.is_alive():
            daemon.clear_images(name)
            # Content may still be awaiting GC, which blocks removal; that is harmless.
            daemon.ctr("namespaces", "rm", name, namespace=name, check=False)


@pytest.fixture
def load_images(tmp_path: pathlib.Path) -> Callable[..., list[images.ImageInfo]]:
    """Factory: ``load_images(daemon, recipes, namespace="k8s.io")`` builds and imports.

    In ``k8s.io`` it returns once the CRI lists every ref.
    """

    def load(
        daemon: ContainerdDaemon,
        recipes: Iterable[images.ImageRecipe],
        namespace: str = cri.NAMESPACE,
        *,
        unpack: bool = False,
    ) -> list[images.ImageInfo]:
        return images.load_images(daemon, tmp_path / "archives", recipes, namespace, unpack=unpack)

    return load


@pytest.fixture
def sigint_at_a_shell() -> Iterator[None]:
    """SIGINT handled as at a shell (KeyboardInterrupt) for one test: a suite started in the
    background inherits it ignored, and Python then installs no handler of its own."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


# --- Docker daemons (dockerd 26, Debian trixie) ---------------------------------

import subprocess  # noqa: E402

from tests.harness import docker as docker_harness  # noqa: E402
from tests.harness.docker import DockerDaemon  # noqa: E402

DOCKER_MODES = {"dockerd_containerd_store": "dkr-c8d", "dockerd_classic": "dkr-classic"}


def _session_dockerd(
    name: str, factory: pytest.TempPathFactory, containerd: ContainerdDaemon | None = None
) -> Iterator[DockerDaemon]:
    def start(data_dir: pathlib.Path | None) -> DockerDaemon:
        return DockerDaemon(
            factory.mktemp(name), containerd_store=containerd is not None, containerd=containerd, data_dir=data_dir
        ).start()

    yield from _session_engine(name, start, (subprocess.SubprocessError,))


@pytest.fixture(scope="session")
def dockerd_containerd_store(
    containerd17: ContainerdDaemon, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DockerDaemon]:
    """dockerd 26 keeping its images in ``containerd17``'s namespace ``moby`` (overlayfs snapshotter)."""
    yield from _session_dockerd("dockerd-c8d", tmp_path_factory, containerd17)


@pytest.fixture(scope="session")
def dockerd_classic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerDaemon]:
    """dockerd 26 with the classic image store (vfs) and its own supervised containerd."""
    yield from _session_dockerd("dockerd-classic", tmp_path_factory)


def _empty_after(daemons: list[DockerDaemon]) -> None:
    """The Docker images a test made removed once it ends: the containerd store's are in the
    session's containerd 1.7, namespace ``moby``, which any later test of that daemon lists."""
    for daemon in dict.fromkeys(daemons):
        if daemon.is_alive():
            docker_harness.reset_docker(daemon)


@pytest.fixture
def clean_docker() -> Iterator[Callable[[DockerDaemon], DockerDaemon]]:
    """Factory: ``clean_docker(daemon)`` removes every image (and waits for ``moby`` to empty),
    and again after the test."""
    cleaned: list[DockerDaemon] = []

    def clean(daemon: DockerDaemon) -> DockerDaemon:
        cleaned.append(daemon)
        return docker_harness.reset_docker(daemon)

    yield clean
    _empty_after(cleaned)


@pytest.fixture(params=list(DOCKER_MODES), ids=list(DOCKER_MODES.values()))
def dockerd(request: pytest.FixtureRequest) -> Iterator[DockerDaemon]:
    """Each docker image store in turn, with no images (and none left after the test)."""
    daemon: DockerDaemon = request.getfixturevalue(request.param)
    yield docker_harness.reset_docker(daemon)
    _empty_after([daemon])


@pytest.fixture
def load_docker_images(tmp_path: pathlib.Path) -> Callable[..., list[images.ImageInfo]]:
    """Factory: ``load_docker_images(daemon, recipes)`` builds an archive and ``docker load``s it."""

    def load(daemon: DockerDaemon, recipes: Iterable[images.ImageRecipe]) -> list[images.ImageInfo]:
        return docker_harness.load_images_docker(daemon, tmp_path / "docker-archives", recipes)

    return load

"""Fixtures the integration modules share: a containerd of a test's own, and sockets that are
not what pinctl expects, for the fault tests; and the head start of the periodic GC run."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Sequence
from concurrent import futures
from pathlib import Path
from typing import TypeVar

import grpc
import pytest

from tests.conftest import engine_unavailable
from tests.harness import cri, debs, images
from tests.harness.containerd import ContainerdDaemon, DaemonError
from tests.harness.work_units import CLUSTER_MODULES, PERIODIC_MODULE, PERIODIC_WORKER

# In one process (no xdist): the periodic GC module's scenarios wait 5 minutes for the kubelet's
# second GC run: they start with the first integration test and the module's tests run after the
# last other one, so the other integration tests fill the wait. Not the unit tests: some set
# os.environ, which the scenarios' pinctl and daemons inherit. The cluster modules (the session's
# control plane and its fleet) come last among the integration tests, before the periodic module:
# away from the scenarios' busiest minutes, which come first.
INTEGRATION = Path(__file__).resolve().parent


def under_xdist(config: pytest.Config) -> bool:
    """In a pytest-xdist worker: tests/harness/work_units.py orders the work then, not this module."""
    return hasattr(config, "workerinput")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if under_xdist(config):
        return
    periodic = [item for item in items if item.path.name == PERIODIC_MODULE]
    cluster = [item for item in items if item.path.name in CLUSTER_MODULES and INTEGRATION in item.path.parents]
    rest = [item for item in items if item.path.name != PERIODIC_MODULE and item not in cluster]
    integration = [index for index, item in enumerate(rest) if INTEGRATION in item.path.parents]
    after = integration[-1] + 1 if integration else next(
        (index for index, item in enumerate(rest) if INTEGRATION not in item.path.parents), len(rest))
    items[:] = rest[:after] + cluster + periodic + rest[after:]


@pytest.fixture(scope="session", autouse=True)
def periodic_head_start(request: pytest.FixtureRequest) -> None:
    """The periodic GC run started in the background, when its module is among the tests: in one
    process, or in the xdist worker that alone takes that module (tests/harness/work_units.py),
    at the first integration test it runs."""
    if under_xdist(request.config) and os.environ.get("PYTEST_XDIST_WORKER") != PERIODIC_WORKER:
        return
    if any(item.path.name == PERIODIC_MODULE for item in request.session.items):
        from tests.integration.test_kubelet_gc import start_periodic

        start_periodic(request)


# The engines a test's own containerd comes in: the releases whose CRI honours pin labels.
OWN_ENGINES = {"containerd-1.7": "ctd17", "containerd-2.1": "ctd21", "containerd-2.4": "ctd24"}
# For a test of pinctl's own behaviour that only needs some containerd to talk to.
one_engine = pytest.mark.parametrize("daemon", ["containerd-1.7"], ids=["ctd17"], indirect=True)


@pytest.fixture(params=list(OWN_ENGINES), ids=list(OWN_ENGINES.values()))
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerdDaemon]:
    """A containerd of the test's own (1.7, 2.1, then 2.4.2), for tests that stop and start it (the
    session's are shared). ``one_engine`` limits a test to 1.7."""
    engine: str = request.param
    ctd = ContainerdDaemon(engine, tmp_path_factory.mktemp("own-containerd"))
    try:
        ctd.start()
        images.ensure_sandbox_image(ctd)
    except (debs.EngineUnavailable, DaemonError, cri.CriError, OSError) as exc:
        ctd.stop()
        engine_unavailable(f"{engine} unavailable: {exc}")
    yield ctd
    ctd.stop()


Daemon = TypeVar("Daemon", bound=ContainerdDaemon)


def started_with(found: Daemon, archives: Path, refs: Sequence[str]) -> Iterator[Daemon]:
    """A module's own containerd, started with the sandbox image and then refs loaded (its CRI
    labels what pinned_images names when a record is made), stopped afterwards; an engine that
    cannot run skips (fails in CI)."""
    try:
        found.start()
        images.ensure_sandbox_image(found)
        images.load_images(found, archives, [images.recipe(ref, seed=ref) for ref in refs])
    except (debs.EngineUnavailable, DaemonError, cri.CriError, OSError) as exc:
        found.stop()
        engine_unavailable(f"{found.engine} unavailable: {exc}")
    try:
        yield found
    finally:
        found.stop()


@pytest.fixture
def grpc_without_services(tmp_path: Path) -> Iterator[Path]:
    """A gRPC server that implements nothing: a socket of the wrong daemon."""
    path = tmp_path / "other.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_insecure_port(f"unix://{path}")
    server.start()
    yield path
    server.stop(0)


@pytest.fixture
def mute_socket(tmp_path: Path) -> Iterator[Path]:
    """Accepts connections in the kernel and never speaks: a hung daemon."""
    path = tmp_path / "mute.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(8)
    yield path
    listener.close()

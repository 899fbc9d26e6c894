"""Fixtures the integration modules share: a containerd of a test's own, and sockets that are
not what pinctl expects, for the fault tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from tests.harness import images
from tests.harness.containerd import ContainerdDaemon


@pytest.fixture
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerdDaemon]:
    """A containerd 1.7 of the test's own, for tests that stop and start it (the session's are shared)."""
    ctd = ContainerdDaemon("containerd-1.7", tmp_path_factory.mktemp("own-containerd")).start()
    images.ensure_sandbox_image(ctd)
    yield ctd
    ctd.stop()


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

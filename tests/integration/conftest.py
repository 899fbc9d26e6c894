"""Sockets that are not what pinctl expects, for the fault tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest


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

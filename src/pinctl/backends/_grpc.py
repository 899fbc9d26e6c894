"""gRPC plumbing shared by the gRPC backends: channels on unix sockets and error mapping."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pinctl.backends._socket import check_socket
from pinctl.errors import EngineError, EngineUnreachable

__all__ = ["check_socket", "open_channel", "translate"]

if TYPE_CHECKING:
    import grpc


def open_channel(path: str) -> grpc.Channel:
    import grpc

    # containerd's default message limit is 16 MiB; a namespace with many images
    # can exceed gRPC's 4 MiB client default in a single List answer.
    options = [
        ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        ("grpc.enable_http_proxy", 0),
    ]
    return grpc.insecure_channel(f"unix://{os.path.abspath(path)}", options=options)


# What an engine's socket is set by, for the hint that points there.
FLAGS = {"containerd": "--address or CONTAINERD_ADDRESS"}


def translate(err: Exception, what: str, address: str, timeout: float, api: str = "", flag: str = "") -> EngineError:
    """Turn a grpc.RpcError into the project's one-line error."""
    api = api or f"{what}'s API"
    import grpc

    if not isinstance(err, grpc.RpcError):
        return EngineError(f"{what} at {address}: {err}")
    code = err.code()
    details = err.details() or ""
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return EngineUnreachable(
            f"{what} at {address} did not answer within {timeout:g}s",
            "is it running and healthy? raise --timeout if it is slow",
        )
    if code == grpc.StatusCode.UNAVAILABLE and "connection refused" in details.lower():
        # A daemon that was killed leaves its socket behind: as short as the missing-socket error.
        return EngineUnreachable(f"nothing listens on {address.removeprefix('unix://')}",
                                 f"is {what} running? point {flag or FLAGS.get(what, 'pinctl')} at its socket")
    if code == grpc.StatusCode.UNAVAILABLE:
        return EngineUnreachable(
            f"{what} at {address} is not answering ({_last_error(details) or 'unavailable'})",
            "is it running? check the socket path",
        )
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return EngineError(
            f"{address} does not speak {api} ({details or 'unimplemented'})",
            "is this the right socket?",
        )
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return EngineError(f"{what} at {address} refused: {details}", "run pinctl as root (sudo)")
    return EngineError(f"{what} at {address}: {code.name.lower()}: {details}")


def _last_error(details: str) -> str:
    """gRPC's own error, without the resolver's words around it."""
    line = details.splitlines()[0] if details else ""
    return line.rpartition("last error: ")[2]

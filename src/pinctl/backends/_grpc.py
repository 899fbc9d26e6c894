"""gRPC plumbing shared by the gRPC backends: channels on unix sockets and error mapping; and the
local socket check every backend makes (Docker's too), one clear line before a client library
turns a missing file or a permission problem into a vague timeout."""

from __future__ import annotations

import os
import stat
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol, TypeVar

from pinctl.config.settings import LONGEST_TIMEOUT
from pinctl.errors import EngineError, EngineUnreachable, UsageError

__all__ = ["check_socket", "in_window", "listing", "open_channel", "translate"]

# How many calls one batch keeps in flight. Each call holds buffers in gRPC's core (about 20 KiB
# apiece): 10,000 reads started at once cost 220 MiB, and the last of them waited behind the
# rest for an answer its deadline had already given up on. 64 keep a unix socket busy.
WINDOW = 64

# A listing is one answer that grows with the node (20,000 records at 10,000 images): it may take
# this many --timeouts while the engine keeps answering a small call within one.
PATIENCE = 30


class Cancellable(Protocol):
    def cancel(self) -> bool: ...


Item = TypeVar("Item")
Call = TypeVar("Call", bound=Cancellable)

if TYPE_CHECKING:
    import grpc


def check_socket(path: str, what: str, flag: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise EngineUnreachable(
            f"{what} socket {path} does not exist",
            f"is {what} running? point {flag} at its socket",
        ) from None
    except PermissionError:
        raise EngineUnreachable(
            f"permission denied reaching {what} socket {path}", "run pinctl as root (sudo)"
        ) from None
    except OSError as err:
        # A symlink loop, a name too long, a file where a directory should be: the path is wrong.
        reason = err.strerror or str(err)
        raise UsageError(
            f"cannot use {what} socket {path}: {reason[:1].lower()}{reason[1:]}", f"point {flag} at {what}'s socket"
        ) from None
    if not stat.S_ISSOCK(mode):
        raise EngineUnreachable(f"{path} is not a socket", f"point {flag} at {what}'s socket")
    if not os.access(path, os.R_OK | os.W_OK):
        raise EngineUnreachable(
            f"permission denied on {what} socket {path}", "run pinctl as root (sudo)"
        )


def open_channel(path: str, single_threaded_streams: bool = False) -> grpc.Channel:
    """A channel on a unix socket. single_threaded_streams: server streams are read in the
    caller's thread (gRPC's SingleThreadedUnaryStream), for streams read to the end at once."""
    import grpc

    # containerd's default message limit is 16 MiB; a namespace with many images
    # can exceed gRPC's 4 MiB client default in a single List answer.
    options: list[tuple[str, int]] = [
        ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        ("grpc.enable_http_proxy", 0),
    ]
    if single_threaded_streams:
        options.append((grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1))
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


def in_window(items: Iterable[Item], start: Callable[[Item], Call], size: int = WINDOW) -> Iterator[tuple[Item, Call]]:
    """Each item with its call, in order, never more than ``size`` calls started and not yet
    handed out. A call starts only when there is room, so its deadline counts from then: the
    timeout bounds each answer, not the whole batch. The caller finishes a call before asking for
    the next one; calls still in flight are cancelled when the caller stops early."""
    in_flight: deque[tuple[Item, Call]] = deque()
    try:
        for item in items:
            in_flight.append((item, start(item)))
            if len(in_flight) >= size:
                yield in_flight.popleft()
        while in_flight:
            yield in_flight.popleft()
    finally:
        for _item, call in in_flight:
            call.cancel()


def listing(start: Callable[[float], Any], probe: Callable[[], Any], timeout: float,
            fail: Callable[[Any, float], Exception], started: Any = None) -> Any:
    """The answer of a call that may be large. ``start(deadline)`` and ``probe()`` (a small call
    with the ordinary deadline) each start a call and give its future. The answer is waited for
    one ``timeout`` at a time with a probe in flight beside it: if the answer has not come and
    the probe has not been answered either, the engine is not answering and ``fail(error,
    seconds waited)`` is raised after about one timeout, as for any call. While the probe is
    answered the wait goes on, up to PATIENCE timeouts in all, so a slow engine is not taken
    for a dead one. started: the call's future, when the caller started it earlier (with
    ``start_listing``) to have the answer come while it did other work."""
    import grpc

    longest = min(timeout * PATIENCE, LONGEST_TIMEOUT)
    answer = started if started is not None else start_listing(start, timeout)
    while True:
        alive = probe()
        try:
            found = answer.result(timeout=timeout)
        except grpc.FutureTimeoutError:
            try:
                alive.result()
            except grpc.RpcError as err:
                answer.cancel()
                raise fail(err, timeout) from None
            continue
        except grpc.RpcError as err:
            raise fail(err, longest) from None
        finally:
            alive.cancel()
        return found


def start_listing(start: Callable[[float], Any], timeout: float) -> Any:
    """The future of a large call started now, with the deadline ``listing`` gives it."""
    return start(min(timeout * PATIENCE, LONGEST_TIMEOUT))

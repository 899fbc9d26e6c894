"""The Python data path's socket: who is calling, for the journal of RemoveImage.

Python's gRPC server gives a call no way to the socket it came on, so the peer's credentials
(SO_PEERCRED) cannot be read there. Instead this process accepts on --listen itself, reads each
connection's credentials, and joins it to gRPC's server on a private socket through a connection
bound to an abstract name of its own: gRPC reports that name as the call's peer
("unix-abstract:pinctl-cri-proxy-PID-N"), and N finds the caller. Bytes pass as they come, both
ways, and each side's end of stream is passed on (a follower of GetContainerEvents that leaves
ends its call). The relay needs none of this: grpc-go hands it the connection (cri-relay/remove.go).
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import struct
import tempfile
import threading
from typing import Optional

from pinctl.criproxy.remove import Caller, caller_from_pid

CHUNK = 256 * 1024
BACKLOG = 128
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_pid(conn: socket.socket) -> int:
    try:
        pid, _, _ = _UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    except OSError:
        return 0
    return int(pid)


class PeerJoiner:
    """Accepts on listen (made with the given mode) and joins each connection to the gRPC server
    on inner_path(), remembering its caller."""

    def __init__(self, listen: str, mode: int) -> None:
        self.listen = listen
        self._dir = tempfile.mkdtemp(prefix="pinctl-cri-proxy-")  # 0700: only this process reaches it
        self.inner = os.path.join(self._dir, "grpc.sock")
        self._prefix = f"pinctl-cri-proxy-{os.getpid()}-{id(self):x}-"
        self._numbers = itertools.count(1)
        self._callers: dict[str, Caller] = {}
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stopped = False
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        previous = os.umask(0o777 & ~mode)
        try:
            self._listener.bind(listen)
        finally:
            os.umask(previous)
        self._listener.listen(BACKLOG)

    def start(self) -> None:
        threading.Thread(target=self._accept, name="cri-proxy-accept", daemon=True).start()

    def caller(self, peer: str) -> Caller:
        """The caller of a call whose gRPC peer is peer; unknown for any other."""
        name = peer.partition("unix-abstract:")[2]
        return self._callers.get(name, Caller())

    def stop_accepting(self) -> None:
        self._stopped = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()

    def close(self) -> None:
        """Ends every joined connection and removes the private socket's directory."""
        self.stop_accepting()
        with self._lock:
            live = list(self._open)
        for conn in live:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        shutil.rmtree(self._dir, ignore_errors=True)

    def _accept(self) -> None:
        while not self._stopped:
            try:
                outer, _ = self._listener.accept()
            except OSError:
                if self._stopped:
                    return
                continue
            try:
                self._join(outer)
            except OSError:
                outer.close()

    def _join(self, outer: socket.socket) -> None:
        name = f"{self._prefix}{next(self._numbers)}"
        inner = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            inner.bind("\0" + name)
            inner.connect(self.inner)
        except OSError:
            inner.close()
            raise
        with self._lock:
            self._callers[name] = caller_from_pid(peer_pid(outer))
            self._open.update((outer, inner))
        ends = [2]

        def done() -> None:
            with self._lock:
                ends[0] -= 1
                last = ends[0] == 0
                if last:
                    self._callers.pop(name, None)
                    self._open.difference_update((outer, inner))
            if last:
                outer.close()
                inner.close()

        for source, target, label in ((outer, inner, "in"), (inner, outer, "out")):
            threading.Thread(target=_pump, args=(source, target, done), name=f"cri-proxy-{label}",
                             daemon=True).start()


def _pump(source: socket.socket, target: socket.socket, done: object) -> None:
    """Copy source to target until source ends, then end target's sending side."""
    try:
        while True:
            data: Optional[bytes]
            try:
                data = source.recv(CHUNK)
            except OSError:
                data = None
            if not data:
                break
            try:
                target.sendall(data)
            except OSError:
                try:
                    source.shutdown(socket.SHUT_RD)
                except OSError:
                    pass
                break
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass
    finally:
        done()  # type: ignore[operator]

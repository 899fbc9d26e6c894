"""Free TCP ports for the harness's servers (kubelets, registries, Prometheus, the control plane).

A port is picked now and bound by the server a moment later. A port from the kernel's ephemeral
range (``net.ipv4.ip_local_port_range``, 32768-60999 by default) can be taken in between by any
outgoing connection on the machine, and the suite makes thousands (gRPC, kubectl, the kubelets):
a kubelet once failed "bind: address already in use" that way. So ports come from the range
below it, which only explicit binds use, and none is handed out twice by one process. Under
pytest-xdist each worker picks from a slice of its own, so two workers never race for one port.
"""

from __future__ import annotations

import os
import random
import socket
import threading

RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
# How far below the ephemeral range to pick from.
SPAN = 12000
_handed: set[int] = set()
_lock = threading.Lock()


def ephemeral_low(path: str = RANGE_FILE) -> int:
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def worker_slice(low: int, high: int, worker: str | None = None, workers: str | None = None) -> tuple[int, int]:
    """The part of [low, high) a pytest-xdist worker (``gw3`` of 4) picks from; all of it outside
    xdist. The worker and their count come from xdist's environment unless given."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "") if worker is None else worker
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "") if workers is None else workers
    if not (worker.startswith("gw") and worker[2:].isdigit() and workers.isdigit() and int(workers) > 1):
        return low, high
    count, index = int(workers), int(worker[2:]) % int(workers)
    width = (high - low) // count
    return low + index * width, low + (index + 1) * width


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at ``host`` now, below the ephemeral range, not handed out before
    by this process (the kernel's choice when no such port is found in 500 tries)."""
    low, high = worker_slice(max(1024, ephemeral_low() - SPAN), ephemeral_low())
    with _lock:
        for _ in range(500):
            port = random.randrange(low, high)
            if port not in _handed and _bindable(host, port):
                _handed.add(port)
                return port
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            port = int(probe.getsockname()[1])
        _handed.add(port)
        return port


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True

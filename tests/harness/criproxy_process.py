"""``pinctl cri-proxy`` as a process of the tests: the CRI proxy tests, the periodic GC run's seed
scenario and the fleet's cri-dockerd node."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.harness.containerd import ContainerdDaemon


class ProxyProcess:
    """`pinctl cri-proxy` as a process, on a short socket path (unix paths are limited to 108 bytes)."""

    def __init__(self, daemon: ContainerdDaemon | None, upstream: str, *extra: str, env: dict[str, str] | None = None,
                 listen: str | None = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="px", dir="/tmp")
        self.path = listen or os.path.join(self.dir, "cri.sock")
        self.log = Path(self.dir) / "proxy.log"
        # Its own deletion journal (and presence mark), read by the tests through .history.
        self.history = Path(self.dir) / "history"
        if daemon is None:  # a node without containerd (CRI-O): as an operator there runs pinctl
            base = {key: value for key, value in os.environ.items()
                    if key not in ("CONTAINERD_ADDRESS", "PINCTL_CONTAINERD_CONFIG", "CONTAINERD_NAMESPACE",
                                   "DOCKER_HOST", "PINCTL_CONFIG")}
        else:
            base = {**os.environ, "CONTAINERD_ADDRESS": daemon.address,
                    "PINCTL_CONTAINERD_CONFIG": str(daemon.config_path)}
        full_env = {**base, "PINCTL_HISTORY_DIR": str(self.history), **(env or {})}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pinctl", "cri-proxy", "--listen", self.path, "-r", f"unix://{upstream}",
                 *extra], stdout=subprocess.DEVNULL, stderr=log, env=full_env)

    def wait_serving(self, timeout: float = 120.0) -> ProxyProcess:
        """Until the proxy says it serves. A proxy that cannot start exits, and says why, at once; the
        bound is for one that hangs: the periodic run starts twenty nodes (three proxies among them)
        at once beside the rest of the suite, and with both cores busy a proxy's start took over 20 s."""
        deadline = time.monotonic() + timeout
        while "serving the CRI" not in self.log.read_text():
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.05)
        return self

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            shutil.rmtree(self.dir, ignore_errors=True)

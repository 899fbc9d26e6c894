"""Private cri-dockerd processes (built by ``gobuild``) in front of a harness dockerd.

cri-dockerd is the CRI for Docker: the kubelet asks it, and it asks dockerd. It never reads
containerd: with dockerd's containerd image store the images live in containerd's ``moby``
namespace, but cri-dockerd sees only what dockerd's API shows of them.

What its defaults would do to the host, read from its source (v0.4.3), and what we pass:

- socket ``/var/run/cri-dockerd.sock``, root ``/var/lib/cri-dockerd``, dockerd at
  ``/var/run/docker.sock``: ``--container-runtime-endpoint``, ``--cri-dockerd-root-directory``
  and ``--docker-endpoint`` point at private paths and the harness dockerd;
- the streaming server (exec, attach, port-forward) binds every address when
  ``--streaming-bind-addr`` is empty: ``127.0.0.1:0``, loopback and a free port;
- ``--network-plugin`` empty is not "none": the no-op plugin runs ``modprobe br-netfilter``
  and sets the host's ``net.bridge.bridge-nf-call-iptables`` sysctls. The CNI plugin
  (the default) with private, empty conf, bin and cache dirs only reads them, so that;
- at start and every 5 minutes it looks up every process named ``dockerd`` or
  ``containerd`` on the machine and sets their ``oom_score_adj`` to -999 (other people's
  daemons too). It runs in a PID namespace of its own (``unshare --pid --mount-proc``), where
  it finds none; network, mounts of the host and the sockets it uses are unchanged;
- it tells systemd it is ready through ``NOTIFY_SOCKET`` and takes sockets from
  ``LISTEN_FDS``: both are removed from its environment.

Two cri-dockerds can share one dockerd: they only read its images here, and each keeps its
own root directory (sandbox checkpoints).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence

from tests.harness import containerd as ctd
from tests.harness import cri, gobuild
from tests.harness.containerd import DaemonError
from tests.harness.docker import DockerDaemon
from tests.harness.protowire import Reader

DEFAULT_SANDBOX_IMAGE = ctd.DEFAULT_SANDBOX_IMAGE
VERSION = "/runtime.v1.RuntimeService/Version"
READY_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0
STREAMING_BIND = "127.0.0.1:0"
_DROPPED_ENV = ("NOTIFY_SOCKET", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


class CriDockerdError(DaemonError):
    """A private cri-dockerd failed to start, answer or stop."""


_RUNNING: dict[int, CriDockerd] = {}


def _stop_all() -> None:
    for daemon in list(_RUNNING.values()):
        daemon.stop()


# Registered after docker.py's handler, so it runs first: the CRI goes before its dockerd.
atexit.register(_stop_all)


class CriDockerd:
    """One cri-dockerd process with private paths under ``base_dir``, talking to ``docker``."""

    def __init__(
        self,
        engine: str,
        docker: DockerDaemon,
        base_dir: pathlib.Path,
        *,
        sandbox_image: str = DEFAULT_SANDBOX_IMAGE,
        pinned_images: Sequence[str] = (),
        pinned_image_labels: Sequence[str] = (),
    ) -> None:
        self.engine = engine
        self.docker = docker
        self.base_dir = pathlib.Path(base_dir).resolve()
        self.sandbox_image = sandbox_image
        self.pinned_images = tuple(pinned_images)
        self.pinned_image_labels = tuple(pinned_image_labels)
        self.binary = gobuild.binary(engine)
        self._temp_dirs: list[pathlib.Path] = []
        self.address = str(self._socket_dir() / "cri-dockerd.sock")
        self.endpoint = f"unix://{self.address}"
        self.root_dir = self.base_dir / "root"
        self.cni_dir = self.base_dir / "cni"
        self.log_path = self.base_dir / "cri-dockerd.log"
        self.pid: int | None = None  # the unshare wrapper
        self.child_pid: int | None = None  # cri-dockerd itself, PID 1 of its namespace
        self.runtime_name = ""
        self.runtime_version = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        args = [
            # --kill-child: cri-dockerd gets SIGTERM when the wrapper dies, however it dies.
            "unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM",
            str(self.binary),
            f"--container-runtime-endpoint={self.endpoint}",
            f"--cri-dockerd-root-directory={self.root_dir}",
            f"--docker-endpoint={self.docker.host}",
            f"--pod-infra-container-image={self.sandbox_image}",
            f"--streaming-bind-addr={STREAMING_BIND}",
            "--network-plugin=cni",
            f"--cni-conf-dir={self.cni_dir / 'conf'}",
            f"--cni-bin-dir={self.cni_dir / 'bin'}",
            f"--cni-cache-dir={self.cni_dir / 'cache'}",
            "--log-level=info",
        ]
        # One flag per value: a string-list flag takes repeats, and a value keeps its commas.
        args += [f"--pinned-images={pattern}" for pattern in self.pinned_images]
        args += [f"--pinned-image-labels={selector}" for selector in self.pinned_image_labels]
        return args

    def start(self) -> CriDockerd:
        """Launch cri-dockerd and wait until its CRI answers ``Version``."""
        if self.is_alive():
            return self
        if shutil.which("unshare") is None:
            raise CriDockerdError("unshare (util-linux) not found: cri-dockerd runs in a PID namespace of its own")
        for path in (self.root_dir, self.cni_dir / "conf", self.cni_dir / "bin", self.cni_dir / "cache"):
            path.mkdir(parents=True, exist_ok=True)
        env = {key: value for key, value in os.environ.items() if key not in _DROPPED_ENV}
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                # SIGKILL, not SIGTERM as for the other daemons: unshare ignores SIGTERM while it
                # waits for its child, and its --kill-child passes the death on to cri-dockerd.
                ctd.dying_with_parent(self.argv(), "KILL"), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env=env,
            )
        self.pid = self._proc.pid
        _RUNNING[self.pid] = self
        self._wait_ready()
        return self

    def stop(self) -> None:
        """SIGTERM cri-dockerd (unshare ignores it while it waits), then SIGKILL; repeatable."""
        pid, self.pid = self.pid, None
        if pid is None:
            return
        _RUNNING.pop(pid, None)
        child = self.child_pid or _only_child(pid)
        if child is not None:
            ctd._signal(child, signal.SIGTERM)
        if not self._wait_exit(STOP_GRACE_S):
            if child is not None:
                ctd._signal(child, signal.SIGKILL)
            ctd._signal(pid, signal.SIGKILL)
            self._wait_exit(STOP_GRACE_S)
        self._proc = None
        self.child_pid = None
        with contextlib.suppress(OSError):
            os.unlink(self.address)
        for path in self._temp_dirs:
            shutil.rmtree(path, ignore_errors=True)

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def list_images(self) -> list[cri.CriImage]:
        """``ListImages`` straight over gRPC (no crictl), decoded by field number."""
        return cri.list_images(self.address)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = ""
        while time.monotonic() < deadline and self.is_alive():
            if self.child_pid is None and self.pid is not None:
                self.child_pid = _only_child(self.pid)
            if os.path.exists(self.address):
                try:
                    reply = Reader(cri.unary_call(self.address, VERSION, b""))
                except cri.CriError as exc:
                    last = str(exc)
                else:
                    # VersionResponse: version (1), runtime_name (2), runtime_version (3).
                    self.runtime_name, self.runtime_version = reply.text(2), reply.text(3)
                    return
            time.sleep(0.1)
        state = "not answering" if self.is_alive() else "exited"
        self.stop()
        raise CriDockerdError(f"{self.engine} {state} at {self.address} ({last})\n--- log tail ---\n{self.log_tail()}")

    def _wait_exit(self, timeout: float) -> bool:
        if self._proc is None:
            return True
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _socket_dir(self) -> pathlib.Path:
        preferred = self.base_dir / "s"
        if len(str(preferred / "cri-dockerd.sock")) <= ctd.MAX_SOCKET_PATH:
            preferred.mkdir(parents=True, exist_ok=True)
            return preferred
        # Deep pytest temp dirs can overflow sun_path.
        fallback = pathlib.Path(tempfile.mkdtemp(prefix="cdd-", dir="/tmp"))
        self._temp_dirs.append(fallback)
        return fallback


def _only_child(pid: int) -> int | None:
    """The one child of ``pid`` (unshare's forked cri-dockerd), from /proc."""
    try:
        children = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if len(children) == 1 else None



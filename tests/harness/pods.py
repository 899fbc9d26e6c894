"""Real pods through containerd 1.7's CRI: a daemon that can run them, and pods for a test.

What makes pods run here (root without CAP_SYS_RESOURCE, no CNI, no registry):

* runc from Debian (``/usr/sbin/runc``) with a private ``--root``, so teardown can find and kill
  exactly this daemon's containers, and containerd's own bin directory first on PATH so it
  starts the ``containerd-shim-runc-v2`` of the same version;
* host network (``NamespaceMode NODE`` in the sandbox's and containers' namespace options, no
  hostname), so no CNI plugin is ever run;
* ``restrict_oom_score_adj = true``, because the shim may not lower an OOM score here;
* the sandbox (pause) image imported locally before the first pod (``runnable.ensure_runnable_sandbox_image``);
* ``stats_collect_period = 1``, so ``ImageFsInfo`` follows changes within a second;
* the daemon's root and state on a small dedicated tmpfs (:class:`DedicatedFs`), so the image
  filesystem's capacity and free space, as the kubelet reads them with statfs, are real.

The raw CRI calls are in ``tests/harness/cri_pods.py``, the runnable images (busybox, the
sandbox image) in ``tests/harness/runnable.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Literal, Optional

from tests.harness import containerd as ctd
from tests.harness import cri
from tests.harness.containerd import ContainerdDaemon
from tests.harness.cri_pods import (
    STATE_TIMEOUT_S,
    ContainerState,
    CriContainer,
    create_container,
    list_containers,
    list_pod_sandboxes,
    remove_container,
    remove_pod_sandbox,
    run_pod_sandbox,
    sandbox_config,
    start_container,
    stop_pod_sandbox,
)
from tests.harness.protowire import Message
from tests.harness.runnable import PodsUnavailable, busybox_path, ensure_runnable_sandbox_image

RUNC_PATHS = (pathlib.Path("/usr/sbin/runc"), pathlib.Path("/usr/bin/runc"))
WantedState = Literal["created", "running", "exited"]
DEFAULT_FS_BYTES = 256 * 1024 * 1024
CRI_TABLE = '[plugins."io.containerd.grpc.v1.cri"]'


# --- the daemon --------------------------------------------------------------------------------


def runc_binary() -> pathlib.Path:
    for path in RUNC_PATHS:
        if path.is_file():
            return path
    raise PodsUnavailable("runc not found: install Debian's runc package (scripts/test-packages.txt lists it)")


class PodsDaemon(ContainerdDaemon):
    """A containerd whose CRI can run pods (see the module docstring for why each setting)."""

    def __init__(self, engine: str, base_dir: pathlib.Path, *, data_dir: pathlib.Path) -> None:
        super().__init__(engine, base_dir, data_dir=data_dir)
        self.runc = runc_binary()
        self.runc_root = self.base_dir / "runc"
        self.pod_log_dir = self.base_dir / "pod-logs"

    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([str(self.bin_dir), env.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")])
        return env

    def render_config(self) -> str:
        if self.config_version >= 3:
            return ctd.with_pod_settings_v3(super().render_config(), self.runc, self.runc_root)
        lines = super().render_config().splitlines()
        if CRI_TABLE not in lines:
            raise RuntimeError(f"containerd config has no {CRI_TABLE} table to extend")
        at = lines.index(CRI_TABLE) + 1
        lines[at:at] = ["  restrict_oom_score_adj = true", "  stats_collect_period = 1"]
        runc_table = f"{CRI_TABLE[:-1]}.containerd.runtimes.runc]"
        lines += [
            runc_table,
            '  runtime_type = "io.containerd.runc.v2"',
            f"{runc_table[:-1]}.options]",
            f"  BinaryName = {json.dumps(str(self.runc))}",
            f"  Root = {json.dumps(str(self.runc_root))}",
            "",
        ]
        return "\n".join(lines)

    def leftover_tasks(self) -> list[str]:
        """Container ids runc still knows under this daemon's private root."""
        if not self.runc_root.is_dir():
            return []
        proc = subprocess.run(
            [str(self.runc), "--root", str(self.runc_root), "list", "-q"],
            capture_output=True, text=True, timeout=30, check=False,
        )
        return proc.stdout.split()

    def kill_leftovers(self) -> None:
        """After the daemon stopped: remove its containers and end its shims (by PID, only ours)."""
        for task in self.leftover_tasks():
            subprocess.run(
                [str(self.runc), "--root", str(self.runc_root), "delete", "--force", task],
                capture_output=True, timeout=30, check=False,
            )
        for pid in _shim_pids(self.address):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _shim_pids(address: str) -> list[int]:
    """Shims started by the daemon at ``address``: their argv names it after ``-address``."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and address.encode() in argv:
            found.append(int(entry.name))
    return found


# --- a small dedicated filesystem ---------------------------------------------------------------


class DedicatedFs:
    """A tmpfs of ``size_bytes`` at ``path``: statfs reports exactly its capacity and free space.

    tmpfs rather than a loop-mounted ext4 image: no root-reserved blocks or journal to explain,
    capacity is the size asked for, and nothing is left on disk if a run is killed. ``close``
    unmounts everything below it first (container rootfs mounts), lazily if still busy.
    """

    def __init__(self, path: pathlib.Path, size_bytes: int = DEFAULT_FS_BYTES) -> None:
        self.path = pathlib.Path(path)
        self.size_bytes = size_bytes
        self.mounted = False

    def open(self) -> DedicatedFs:
        self.path.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_bytes},mode=0755", "tmpfs", str(self.path)],
            capture_output=True, text=True, timeout=30, check=False,
        )
        if proc.returncode != 0:
            raise PodsUnavailable(f"cannot mount a tmpfs at {self.path}: {proc.stderr.strip()}")
        self.mounted = True
        atexit.register(self.close)
        return self

    def statvfs(self) -> os.statvfs_result:
        return os.statvfs(self.path)

    @property
    def capacity(self) -> int:
        """Capacity as the kubelet computes it (f_blocks x f_frsize)."""
        stat = self.statvfs()
        return stat.f_blocks * stat.f_frsize

    @property
    def available(self) -> int:
        """Available bytes as the kubelet computes them (f_bavail x f_frsize)."""
        stat = self.statvfs()
        return stat.f_bavail * stat.f_frsize

    def close(self) -> None:
        if not self.mounted:
            return
        for mountpoint in sorted(_mounts_below(self.path), key=len, reverse=True):
            _unmount(mountpoint)
        self.mounted = False
        with contextlib.suppress(OSError):
            self.path.rmdir()


def _mounts_below(root: pathlib.Path) -> list[str]:
    """Mount points at or below ``root``, from /proc/self/mountinfo (field 5 is the mount point)."""
    prefix = str(root.resolve())
    found = []
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(point)
    return found


def _unmount(mountpoint: str) -> None:
    for args in (["umount", mountpoint], ["umount", "-l", mountpoint]):
        if subprocess.run(args, capture_output=True, timeout=30, check=False).returncode == 0:
            return


# --- pods and containers for a test -----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Pod:
    id: str
    name: str
    config: Message


@dataclasses.dataclass(frozen=True)
class PodContainer:
    """A container the harness made, with how long making it took."""

    pod: Pod
    id: str
    image: str
    state: WantedState
    seconds: float


COMMANDS: dict[WantedState, list[str]] = {
    "running": ["/bin/busybox", "sleep", "3600"],
    "exited": ["/bin/busybox", "true"],
    "created": ["/bin/busybox", "sleep", "3600"],
}


class Pods:
    """Makes pods and containers on one daemon and removes all of them in :meth:`cleanup`."""

    def __init__(self, daemon: PodsDaemon) -> None:
        self.daemon = daemon
        self.address = daemon.address
        self._counter = 0

    def _name(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}-{os.getpid()}-{self._counter}"

    def pod(self, name: str = "") -> Pod:
        name = name or self._name("pod")
        log_dir = self.daemon.pod_log_dir / name
        log_dir.mkdir(parents=True, exist_ok=True)
        config = sandbox_config(name, log_dir)
        return Pod(run_pod_sandbox(self.address, config), name, config)

    def container(
        self, image: str, state: WantedState = "running", *, pod: Optional[Pod] = None, name: str = ""
    ) -> PodContainer:
        """A container of ``image`` left running, exited (ran ``true``) or only created."""
        began = time.monotonic()
        pod = pod or self.pod()
        name = name or self._name("ctr")
        container_id = create_container(self.address, pod.id, pod.config, name, image, COMMANDS[state])
        if state != "created":
            start_container(self.address, container_id)
            self.wait_for_state(container_id, state)
        return PodContainer(pod, container_id, image, state, time.monotonic() - began)

    def wait_for_state(
        self, container_id: str, state: ContainerState, timeout: float = STATE_TIMEOUT_S
    ) -> CriContainer:
        deadline = time.monotonic() + timeout
        while True:
            found = {c.id: c for c in list_containers(self.address)}.get(container_id)
            if found is not None and found.state == state:
                return found
            if time.monotonic() > deadline:
                now_in = found.state if found else "gone"
                raise cri.CriError(f"container {container_id} is {now_in}, not {state}, after {timeout}s")
            time.sleep(0.02)

    def cleanup(self) -> None:
        """Stop and remove every pod sandbox (and so its containers) on the daemon."""
        for sandbox in list_pod_sandboxes(self.address):
            with contextlib.suppress(cri.CriError):
                stop_pod_sandbox(self.address, sandbox.id)
            with contextlib.suppress(cri.CriError):
                remove_pod_sandbox(self.address, sandbox.id)
        for container in list_containers(self.address):
            with contextlib.suppress(cri.CriError):
                remove_container(self.address, container.id)


@contextlib.contextmanager
def pods_daemon(
    engine: str, base_dir: pathlib.Path, fs_bytes: int = DEFAULT_FS_BYTES
) -> Iterator[tuple[PodsDaemon, DedicatedFs]]:
    """A started pod-capable daemon on a fresh dedicated filesystem; everything undone on exit."""
    runc_binary()
    busybox_path()
    fs = DedicatedFs(base_dir / "imagefs", fs_bytes).open()
    daemon: Optional[PodsDaemon] = None
    try:
        daemon = PodsDaemon(engine, base_dir / "daemon", data_dir=fs.path)
        daemon.start()
        ensure_runnable_sandbox_image(daemon)
        yield daemon, fs
    finally:
        if daemon is not None:
            _shut_down(daemon)
        fs.close()


def _shut_down(daemon: PodsDaemon) -> None:
    if daemon.is_alive():
        with contextlib.suppress(cri.CriError):
            Pods(daemon).cleanup()
    daemon.stop()
    daemon.kill_leftovers()
    shutil.rmtree(daemon.runc_root, ignore_errors=True)

"""Private Docker daemons (dockerd 26 from Debian trixie) for integration tests.

Two modes:

- containerd image store (``containerd_store=True``): dockerd talks to a
  harness :class:`ContainerdDaemon` and keeps its images there, in namespace
  ``moby``, exactly where pinctl looks for them.
- classic (``containerd_store=False``): the graph-driver image store (``vfs``);
  dockerd supervises its own containerd (the engine's ``containerd`` binary),
  which only runs containers and never holds images.

Every path (data root, exec root, pidfile, socket, daemon.json, CLI config)
is private, so several daemons can run side by side and none touches the
host's /var/lib/docker, /run/docker.sock, /etc/docker or ~/.docker (dockerd
only creates the empty, hard-coded plugin socket dir /run/docker/plugins).

What differs between the stores (dockerd 26.1.5):

- image ids: classic shows the config digest (``ImageInfo.image_id``); the
  containerd store shows the manifest or index digest (``ImageInfo.digest``).
  :func:`expected_id` picks the right one.
- ``docker load``: the containerd store imports the archive's OCI layout, so
  it takes multi-platform images and names them by ``io.containerd.image.name``
  (full refs in ``moby``: ``<default registry>/library/x:1`` for a short ``x:1``); the
  classic store reads only ``manifest.json`` RepoTags and cannot take them.
- runc from trixie needs glibc 2.38, so no container can run on a bookworm
  host; dockerd only warns, and images are all these tests need.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from typing import Any

from tests.harness import containerd as ctd
from tests.harness import debs, images
from tests.harness.containerd import ContainerdDaemon, DaemonError

ENGINE = "docker-26"
MOBY_NAMESPACE = "moby"
# dockerd applies migrations and (classic) starts its own containerd first.
READY_TIMEOUT_S = 60.0
# dockerd waits for containers and its containerd on SIGTERM; there are none to wait for.
STOP_GRACE_S = 15.0
CLI_TIMEOUT_S = 120.0
LOAD_TIMEOUT_S = 1800.0
# The snapshotter dockerd asks the harness containerd for. overlayfs mounts
# fine here (kernel 6.18, containerd root on tmpfs); where the sandbox forbids
# overlay mounts, containerd reports the plugin as skipped and we use native.
PREFERRED_SNAPSHOTTER = "overlayfs"
FALLBACK_SNAPSHOTTER = "native"
# vfs needs no mounts at all and images here are one tiny layer: the copies it
# makes cost nothing, and it works in any sandbox.
CLASSIC_DRIVER = "vfs"
# What `docker info` reports in DriverStatus when images live in containerd.
SNAPSHOTTER_DRIVER_TYPE = "io.containerd.snapshotter.v1"
MNT_DETACH = 2
# Above this many images, reset_docker empties a containerd store through ctr.
BULK_REMOVE_OVER = 50


class DockerError(DaemonError):
    """A private dockerd failed to start, answer or stop, or a CLI call failed."""


_RUNNING: dict[int, DockerDaemon] = {}


def _stop_all() -> None:
    for daemon in list(_RUNNING.values()):
        daemon.stop()


# Registered after containerd's handler, so it runs first: dockerd goes before
# the containerd it depends on.
atexit.register(_stop_all)


class DockerDaemon:
    """One dockerd process with private paths under ``base_dir``."""

    def __init__(
        self,
        base_dir: pathlib.Path,
        *,
        containerd_store: bool = False,
        containerd: ContainerdDaemon | None = None,
        storage_driver: str | None = None,
        data_dir: pathlib.Path | None = None,
        engine: str = ENGINE,
    ) -> None:
        if containerd_store and containerd is None:
            raise ValueError("containerd_store=True needs the ContainerdDaemon to keep images in")
        self.engine = engine
        self.containerd_store = containerd_store
        # Classic mode never uses the harness containerd: dockerd runs its own.
        self.containerd = containerd if containerd_store else None
        self.base_dir = pathlib.Path(base_dir).resolve()
        # The data root may live elsewhere (tmpfs), like the containerd harness's root.
        self.data_dir = pathlib.Path(data_dir).resolve() if data_dir else self.base_dir
        self.storage_driver = storage_driver or ""
        root = debs.engine_dir(engine)
        self.bin_dirs = [root / "usr" / "sbin", root / "usr" / "bin"]
        self.dockerd_path = root / "usr" / "sbin" / "dockerd"
        self.cli_path = root / "usr" / "bin" / "docker"
        # The exec root holds the supervised containerd's sockets: keep it short.
        # Fallback dirs made in /tmp for short socket paths; removed again by stop().
        self._temp_dirs: list[pathlib.Path] = []
        self.exec_root = self._short_dir("x", "containerd/containerd.sock.ttrpc")
        self.socket = str(self._short_dir("s", "docker.sock") / "docker.sock")
        self.host = f"unix://{self.socket}"
        self.data_root = self.data_dir / "data-root"
        self.config_path = self.base_dir / "daemon.json"
        self.pidfile = self.base_dir / "docker.pid"
        self.log_path = self.base_dir / "dockerd.log"
        # A private CLI config dir: the host's ~/.docker (contexts, auth) is never read.
        self.cli_config_dir = self.base_dir / "cli"
        self.pid: int | None = None
        self.version = ""
        self._proc: subprocess.Popen[bytes] | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> DockerDaemon:
        """Write daemon.json, launch dockerd and wait until ``docker version`` answers."""
        if self.pid is not None and self.is_alive():
            return self
        if not self.storage_driver:
            self.storage_driver = self._default_driver()
        self._prepare_dirs()
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                ctd.dying_with_parent(self.argv()),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._daemon_env(),
            )
        self.pid = self._proc.pid
        _RUNNING[self.pid] = self
        self._wait_ready()
        return self

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period; safe to call repeatedly."""
        pid, self.pid = self.pid, None
        if pid is None:
            return
        _RUNNING.pop(pid, None)
        if self._proc is not None:
            ctd._signal(pid, signal.SIGTERM)
            if not self._wait_exit(STOP_GRACE_S):
                ctd._signal(pid, signal.SIGKILL)
                self._wait_exit(STOP_GRACE_S)
        self._proc = None
        # A SIGKILLed dockerd cannot stop the containerd it supervises, nor undo
        # the bind mount it puts on its data root (to make it a shared mount).
        self._kill_supervised_containerd()
        _unmount_if_mounted(self.data_root)
        for path in self._temp_dirs:
            shutil.rmtree(path, ignore_errors=True)

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def argv(self) -> list[str]:
        args = [
            str(self.dockerd_path),
            f"--data-root={self.data_root}",
            f"--exec-root={self.exec_root}",
            f"--pidfile={self.pidfile}",
            f"--host={self.host}",
            f"--config-file={self.config_path}",
            f"--storage-driver={self.storage_driver}",
            # No networking: nothing here runs a container that needs it, and
            # these would otherwise rewrite the host's firewall and sysctls.
            "--iptables=false",
            "--ip6tables=false",
            "--ip-forward=false",
            "--ip-masq=false",
            "--bridge=none",
            "--userland-proxy=false",
            "--log-level=info",
        ]
        if self.containerd is not None:
            args.append(f"--containerd={self.containerd.address}")
        return args

    def render_config(self) -> str:
        # Explicit false too: a later dockerd turns the containerd store on by default.
        return json.dumps({"features": {"containerd-snapshotter": self.containerd_store}}, indent=2) + "\n"

    # -- CLI ---------------------------------------------------------------

    def docker(
        self, *args: str, check: bool = True, timeout: float = CLI_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        """Run the engine's own ``docker`` CLI against this daemon."""
        argv = [str(self.cli_path), "--host", self.host, *args]
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=self._cli_env(), check=False
        )
        if check and proc.returncode != 0:
            raise DockerError(f"docker {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def load(self, tar_path: pathlib.Path, timeout: float = LOAD_TIMEOUT_S) -> list[str]:
        """``docker load -i``; returns what it reports loading (names, or ``sha256:`` ids)."""
        out = self.docker("load", "--quiet", "--input", str(tar_path), timeout=timeout).stdout
        return [_loaded_name(line) for line in out.splitlines() if line.startswith("Loaded image")]

    def images(self, all_images: bool = True) -> list[dict[str, str]]:
        """``docker image ls --no-trunc`` as dicts (keys ``Repository``, ``Tag``, ``ID``, ...)."""
        args = ["image", "ls", "--no-trunc", "--format", "{{json .}}"]
        out = self.docker(*args, *(["--all"] if all_images else [])).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def image_ids(self) -> list[str]:
        """Unique ids of every image, dangling ones included."""
        out = self.docker("image", "ls", "--all", "--quiet", "--no-trunc").stdout
        return sorted(set(out.split()))

    def inspect(self, ref: str) -> dict[str, Any]:
        (doc,) = json.loads(self.docker("image", "inspect", ref).stdout)
        return doc

    def info(self) -> dict[str, Any]:
        return json.loads(self.docker("info", "--format", "{{json .}}").stdout)

    def driver_status(self) -> dict[str, str]:
        """``docker info`` DriverStatus pairs (``driver-type`` names the containerd store)."""
        pairs = self.info().get("DriverStatus") or []
        return {str(key): str(value) for key, value in pairs}

    def uses_containerd_store(self) -> bool:
        return self.driver_status().get("driver-type") == SNAPSHOTTER_DRIVER_TYPE

    def remove_all_images(self) -> None:
        """``docker image rm -f`` every image, in chunks that stay far below ARG_MAX."""
        ids = self.image_ids()
        for start in range(0, len(ids), 500):
            self.docker("image", "rm", "--force", *ids[start : start + 500], check=False, timeout=600)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # -- internals ---------------------------------------------------------

    def _default_driver(self) -> str:
        if not self.containerd_store:
            return CLASSIC_DRIVER
        assert self.containerd is not None
        return PREFERRED_SNAPSHOTTER if _plugin_ok(self.containerd, PREFERRED_SNAPSHOTTER) else FALLBACK_SNAPSHOTTER

    def _prepare_dirs(self) -> None:
        dirs = (self.data_root, self.exec_root, pathlib.Path(self.socket).parent, self.cli_config_dir)
        for path in (self.base_dir, *dirs):
            path.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.render_config())
        (self.cli_config_dir / "config.json").write_text("{}\n")

    def _daemon_env(self) -> dict[str, str]:
        env = _without_docker_vars(os.environ)
        # Engine dirs first: dockerd runs containerd, runc and docker-init from PATH.
        system_path = env.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        env["PATH"] = os.pathsep.join([*(str(d) for d in self.bin_dirs), system_path])
        return env

    def _cli_env(self) -> dict[str, str]:
        env = _without_docker_vars(os.environ)
        env["DOCKER_CONFIG"] = str(self.cli_config_dir)
        return env

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = ""
        while time.monotonic() < deadline and self.is_alive():
            if os.path.exists(self.socket):
                try:
                    proc = self.docker("version", "--format", "{{.Server.Version}}", check=False, timeout=10)
                except subprocess.TimeoutExpired:
                    last = "docker version timed out"
                    continue
                if proc.returncode == 0:
                    self.version = proc.stdout.strip()
                    return
                last = proc.stderr.strip()
            time.sleep(0.2)
        state = "not answering" if self.is_alive() else "exited"
        self.stop()
        raise DockerError(f"dockerd {state} at {self.host} ({last})\n--- log tail ---\n{self.log_tail()}")

    def _wait_exit(self, timeout: float) -> bool:
        assert self._proc is not None
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _short_dir(self, name: str, longest_child: str) -> pathlib.Path:
        """``base_dir/name``, or a short /tmp dir when a socket under it would overflow sun_path."""
        preferred = self.base_dir / name
        if len(str(preferred / longest_child)) <= ctd.MAX_SOCKET_PATH:
            return preferred
        fallback = pathlib.Path(tempfile.mkdtemp(prefix=f"dkr-{name}-", dir="/tmp"))
        self._temp_dirs.append(fallback)
        return fallback

    def _kill_supervised_containerd(self) -> None:
        pidfile = self.exec_root / "containerd" / "containerd.pid"
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            return
        # Only a containerd whose argv names our exec root: the PID may be recycled.
        if ctd._is_our_process(pid, self.exec_root / "containerd" / "containerd.toml"):
            ctd._signal(pid, signal.SIGKILL)


def _plugin_ok(daemon: ContainerdDaemon, snapshotter: str) -> bool:
    """True when ``daemon`` loaded the snapshotter (it test-mounts overlay at start-up)."""
    out = daemon.ctr("plugins", "ls", namespace=MOBY_NAMESPACE).stdout
    for line in out.splitlines():
        fields = line.split()
        if fields[:2] == ["io.containerd.snapshotter.v1", snapshotter]:
            return fields[-1] == "ok"
    return False


def _without_docker_vars(environ: Mapping[str, str]) -> dict[str, str]:
    # DOCKER_HOST, DOCKER_CONTEXT, DOCKER_TLS_VERIFY ... would point somewhere else.
    return {key: value for key, value in environ.items() if not key.startswith("DOCKER_")}


def _loaded_name(line: str) -> str:
    # "Loaded image: example.test/app:1" or "Loaded image ID: sha256:..."
    return line.split(": ", 1)[1].strip()


def _unmount_if_mounted(path: pathlib.Path) -> None:
    """Lazily unmount ``path`` when it is a mount point (left by a killed dockerd)."""
    try:
        mount_points = {line.split()[4] for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines()}
    except OSError:
        return
    if str(path) in mount_points:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.umount2(str(path).encode(), MNT_DETACH)


# -- images ------------------------------------------------------------------


def load_images_docker(
    daemon: DockerDaemon, work_dir: pathlib.Path, recipes: Iterable[images.ImageRecipe]
) -> list[images.ImageInfo]:
    """Build one archive in ``work_dir`` and ``docker load`` it; returns the image descriptions.

    The classic store reads only the archive's ``manifest.json``, which can
    describe one platform per image: multi-platform (index) recipes are
    refused there rather than silently dropped. Digest refs (``name@sha256:``)
    cannot be expressed in RepoTags either and are never created by load.
    """
    recipes = list(recipes)
    if not daemon.containerd_store:
        indexed = [r.refs for r in recipes if r.is_index]
        if indexed:
            raise ValueError(f"classic docker load cannot take multi-platform images: {indexed}")
    work_dir.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix="docker-images-", suffix=".tar", dir=work_dir)
    os.close(handle)
    tar_path = pathlib.Path(name)
    try:
        infos = images.build_archive(tar_path, recipes)
        daemon.load(tar_path)
    finally:
        tar_path.unlink(missing_ok=True)
    return infos


def expected_id(daemon: DockerDaemon, info: images.ImageInfo) -> str:
    """The id ``docker images`` shows for ``info``.

    The classic store names an image by its config digest (what the CRI
    calls the image id); the containerd store by its target, the manifest
    or index digest.
    """
    return info.digest if daemon.containerd_store else info.image_id



def wait_moby_empty(daemon: ContainerdDaemon, timeout: float = 30.0) -> None:
    """Wait until the containerd store has no images left in ``moby``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not daemon.ctr("images", "ls", "-q", namespace=MOBY_NAMESPACE).stdout.split():
            return
        time.sleep(0.1)
    left = daemon.ctr("images", "ls", "-q", namespace=MOBY_NAMESPACE).stdout.split()
    raise DockerError(f"namespace {MOBY_NAMESPACE} still has {len(left)} images: {left[:5]}")


def reset_docker(daemon: DockerDaemon) -> DockerDaemon:
    """Remove every image from ``daemon`` (and, for the containerd store, from ``moby``).

    Large containerd stores are emptied with ``ctr images rm`` instead: dockerd
    26 rescans the whole store for every image it removes, so ``docker rmi -f``
    of 1,000 images takes over ten minutes, while ctr takes seconds. dockerd
    caches nothing about them, so it agrees at once.
    """
    store = daemon.containerd
    if store is not None and len(daemon.image_ids()) > BULK_REMOVE_OVER:
        store.remove_images(store.ctr("images", "ls", "-q", namespace=MOBY_NAMESPACE).stdout.split(), MOBY_NAMESPACE)
    daemon.remove_all_images()
    if daemon.image_ids():
        raise DockerError(f"images left after rm -f: {daemon.image_ids()[:5]}")
    if daemon.containerd is not None:
        wait_moby_empty(daemon.containerd)
    return daemon


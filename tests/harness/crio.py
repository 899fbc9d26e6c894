"""A private CRI-O (built by ``gobuild`` from its Go module) as a test's image and runtime service.

CRI-O is both CRI services in one daemon; it keeps images in containers/storage and runs
containers through conmon and an OCI runtime. What its defaults would touch on the host, read
from its source (v1.34.0, ``pkg/config``, ``internal/criocli``), and what the harness passes:

- config ``/etc/crio/crio.conf`` and drop-ins ``/etc/crio/crio.conf.d``: ``--config`` and
  ``--config-dir`` name private ones; registries.conf (``--registries-conf`` and
  ``--registries-conf-dir``), the signature policy, storage.conf (``CONTAINERS_STORAGE_CONF``)
  and containers.conf (``CONTAINERS_CONF``) are private too, so nothing of
  ``/etc/containers`` is read;
- storage ``/var/lib/containers/storage`` and ``/run/containers/storage``, the socket
  ``/var/run/crio/crio.sock``, its version and clean-shutdown files, the exits and attach
  directories, pod logs in ``/var/log/crio/pods``, the namespaces directory ``/var/run``, crun's
  state ``/run/crun``, NRI's socket, the hooks and CDI directories, the decryption keys, the
  irqbalance files under ``/etc/sysconfig`` (restored at start unless ``disable``): each has a
  key in the private crio.conf;
- still written where no key reaches: containers/image's blob-info cache
  (``/var/lib/containers/cache``), big pulls' temporary files (``/var/tmp``), CNI's cache
  (``/var/lib/cni``). CRI-O therefore runs in a mount namespace of its own (``unshare --mount
  --propagation slave``: nothing mounted there shows on the host), where private directories
  are bound over ``/run``, ``/var/lib``, ``/var/cache``, ``/var/log`` and ``/var/tmp``. The
  socket and every private path live under ``base_dir`` (below ``/tmp``), which the binds do
  not hide, so the host reaches the socket;
- ``--listen`` is a unix socket; the streaming server (exec, attach) binds 127.0.0.1 at a free
  port; metrics are off.

Storage is ``vfs`` (the test images are a few bytes; overlay on the test directory's own
filesystem is not needed), cgroups ``cgroupfs`` (this machine is cgroup v1, no systemd for
CRI-O to talk to), the runtime Debian's runc with Debian's conmon as its monitor (Debian's crun
1.8.1 refuses the spec CRI-O 1.34 writes: "unknown version specified"), CNI plugins
from ``/usr/lib/cni`` with a private, empty network directory (no pod networks: CRI-O starts
and reports NetworkReady false).

Registries: no search registries, short names enforced; the default domain
(``pinctl.refs.DEFAULT_DOMAIN``) is rewritten to the loopback registry (a ``location``, not
a mirror, so a pull can never fall back to the network), insecure.

Pins (``[crio.image] pinned_images``), read from ``internal/storage/image.go`` and
``pkg/config`` and tried (tests/integration/test_crio_harness.py): an exact name, a trailing
``*`` (a glob, not anchored at the start) or ``*...*`` (a keyword), case-insensitive, matched
against the image's tag names only (not its digested names, not its ID); the ``pause_image`` is
always added; a lone ``*`` panics CRI-O. The drop-ins are read in
``filepath.Walk`` order (lexical, subdirectories where their name sorts), every file whatever
its name, each overriding the keys it sets; SIGHUP reloads them (see docs/development.md,
"CRI-O", for what the real program did).
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
import tempfile
import time
from collections.abc import Sequence

from pinctl.refs import DEFAULT_DOMAIN
from tests.harness import containerd as ctd
from tests.harness import cri, engines, gobuild, pods
from tests.harness.containerd import DaemonError
from tests.harness.protowire import Reader

VERSION = "/runtime.v1.RuntimeService/Version"
READY_TIMEOUT_S = 90.0
STOP_GRACE_S = 20.0
RELOAD_TIMEOUT_S = 30.0
CONMON = "/usr/bin/conmon"
CNI_PLUGIN_DIR = "/usr/lib/cni"
# The harness's pause image: under the default domain, so the loopback registry serves it.
PAUSE_IMAGE = f"{DEFAULT_DOMAIN}/pinctl-test/pause:3.10"
# Host directories written whatever the config says (see the module's docstring); private
# directories are bound over them in CRI-O's mount namespace.
HIDDEN_HOST_DIRS = ("/run", "/var/lib", "/var/cache", "/var/log", "/var/tmp")
# Where a CRI-O that escaped its roots would write on the host: a test compares them before and
# after. CRI-O's own files only: skopeo (the registry's pushes, as root) writes its blob-info
# cache beside them (blob-info-cache-v1.boltdb, where CRI-O's containers/image writes .sqlite),
# and other test runs on the machine may write /etc/cni/net.d or /var/lib/cni at any time.
WATCHED_HOST_PATHS = (
    "/var/lib/containers/storage",
    "/var/lib/containers/cache/blob-info-cache-v1.sqlite",
    "/var/lib/crio",
    "/run/runc",
    "/run/crio",
    "/run/containers/storage",
    "/etc/crio",
    "/var/log/crio",
)
RELOADED = "Configuration reload completed"
RELOAD_FAILED = "Unable to reload configuration"
_DROPPED_ENV = ("NOTIFY_SOCKET", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "CONTAINER_RUNTIME_ENDPOINT")

# Runs inside the new mount namespace, then becomes crio (same PID, so signals reach it).
NAMESPACE_SCRIPT = r"""
set -eu
for pair in $PINCTL_CRIO_BINDS; do mount --bind "${pair%%=*}" "${pair#*=}"; done
exec "$@"
"""

HostSnapshot = dict[str, tuple[tuple[str, int, int], ...] | None]


class CrioError(DaemonError):
    """A private CRI-O failed to start, answer, reload or stop."""


_RUNNING: dict[int, CrioDaemon] = {}


def _stop_all() -> None:
    for daemon in list(_RUNNING.values()):
        daemon.stop()


atexit.register(_stop_all)


def binary(engine: str = engines.CRIO) -> pathlib.Path:
    """crio, built on first use with pinns beside it (``gobuild``; minutes the first time)."""
    return gobuild.binary(engine)


def toml_list(items: Sequence[str]) -> str:
    # TOML basic strings are JSON strings for what the tests write.
    return "[" + ", ".join(json.dumps(item) for item in items) + "]"


def registry_path(name: str, domains: Sequence[str] = (DEFAULT_DOMAIN,)) -> str:
    """``<domain>/repo:tag`` -> ``repo:tag``, the path the loopback registry holds it at, for a
    name under one of ``domains`` (what registries.conf sends there)."""
    domain, _, path = name.partition("/")
    if domain not in domains or not path:
        raise ValueError(f"{name!r} is under none of {', '.join(domains)}: the loopback registry cannot serve it")
    return path


def pinned_images_dropin(patterns: Sequence[str]) -> str:
    """A drop-in setting ``[crio.image] pinned_images`` (and nothing else)."""
    return f"[crio.image]\npinned_images = {toml_list(patterns)}\n"


def host_snapshot(paths: Sequence[str] = WATCHED_HOST_PATHS) -> HostSnapshot:
    """Each path's tree as (relative path, size, mtime) entries, or None when absent."""
    snapshot: HostSnapshot = {}
    for top in paths:
        root = pathlib.Path(top)
        if not root.exists():
            snapshot[top] = None
            continue
        entries: list[tuple[str, int, int]] = []
        for path in (root, *sorted(root.rglob("*"))):
            with contextlib.suppress(OSError):
                info = path.lstat()
                entries.append((str(path.relative_to(root)), info.st_size, info.st_mtime_ns))
        snapshot[top] = tuple(entries)
    return snapshot


def cgroups_as_mounted(proc_cgroups: str = "/proc/cgroups", mounts: str = "/proc/self/mounts") -> str | None:
    """``/proc/cgroups`` with a v1 controller that is not mounted shown disabled; None if all are.

    CRI-O takes a controller listed enabled there as usable (opencontainers/cgroups
    ``GetAllSubsystems``) and then writes its limits into each container's spec: where the
    kernel has hugetlb but no hierarchy mounts it (this machine), runc fails every container
    ("cannot set hugetlb limit"). Its mount namespace gets this copy instead: what it then
    believes is what is mounted.
    """
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return None  # cgroup v2: /proc/cgroups is not read
    mounted: set[str] = set()
    with open(mounts) as handle:
        for line in handle:
            fields = line.split()
            if len(fields) > 3 and fields[2] == "cgroup":
                mounted.update(fields[3].split(","))
    lines, changed = [], False
    with open(proc_cgroups) as handle:
        for line in handle:
            fields = line.split()
            if not line.startswith("#") and len(fields) >= 4 and fields[3] != "0" and fields[0] not in mounted:
                line, changed = "\t".join([*fields[:3], "0"]) + "\n", True
            lines.append(line)
    return "".join(lines) if changed else None


@dataclasses.dataclass(frozen=True)
class CrioView:
    """Where crio finds its files, socket and storage, as its own mount namespace shows them."""

    config: str
    config_dir: str
    root: str
    runroot: str
    listen: str


class CrioDaemon:
    """One crio process with every path under ``base_dir``, pulling from ``registry_host``.

    A subclass may run it elsewhere: :meth:`view` says where crio sees its paths, :meth:`argv`
    how it is started, ``storage_driver`` and ``registry_prefixes`` what it stores with and
    pulls from (``cluster_crio_node.NodeCrio``)."""

    storage_driver = "vfs"
    # Names under these pull from the loopback registry.
    registry_prefixes: tuple[str, ...] = (DEFAULT_DOMAIN,)

    def __init__(
        self,
        base_dir: pathlib.Path,
        registry_host: str,
        *,
        engine: str = engines.CRIO,
        pause_image: str = PAUSE_IMAGE,
        pinned_images: Sequence[str] = (),
        log_level: str = "info",
    ) -> None:
        self.engine = engine
        self.base_dir = pathlib.Path(base_dir).resolve()
        self.registry_host = registry_host
        self.pause_image = pause_image
        self.pinned_images = tuple(pinned_images)
        self.log_level = log_level
        self.binary = binary(engine)
        self.pinns = self.binary.with_name("pinns")
        self.runc = pods.runc_binary()
        self._temp_dirs: list[pathlib.Path] = []
        self.address = str(self._socket_dir() / "crio.sock")
        self.endpoint = f"unix://{self.address}"
        self.config_path = self.base_dir / "crio.conf"
        self.dropin_dir = self.base_dir / "crio.conf.d"
        self.registries_conf = self.base_dir / "registries.conf"
        self.policy_path = self.base_dir / "policy.json"
        self.root_dir = self.base_dir / "root"
        self.run_dir = self.base_dir / "runroot"
        self.host_dir = self.base_dir / "host"
        self.log_path = self.base_dir / "crio.log"
        self.pid: int | None = None  # crio itself: setpriv, unshare and sh exec into it
        self.runtime_name = ""
        self.runtime_version = ""
        self.host_before: HostSnapshot = {}
        self._proc: subprocess.Popen[bytes] | None = None

    # --- configuration ---------------------------------------------------------------------

    def render_config(self) -> str:
        q = json.dumps
        run, root, base, seen = self.run_dir, self.root_dir, self.base_dir, self.view()
        lines = [
            "[crio]",
            f"root = {q(seen.root)}",
            f"runroot = {q(seen.runroot)}",
            f"storage_driver = {q(self.storage_driver)}",
            f"log_dir = {q(str(base / 'pod-logs'))}",
            f"version_file = {q(str(run / 'version'))}",
            f"version_file_persist = {q(str(root / 'version'))}",
            f"clean_shutdown_file = {q(str(root / 'clean.shutdown'))}",
            "",
            "[crio.api]",
            f"listen = {q(seen.listen)}",
            'stream_address = "127.0.0.1"',
            'stream_port = "0"',
            "",
            "[crio.runtime]",
            'default_runtime = "runc"',
            'cgroup_manager = "cgroupfs"',
            f"namespaces_dir = {q(str(run / 'ns'))}",
            f"pinns_path = {q(str(self.pinns))}",
            f"container_exits_dir = {q(str(run / 'exits'))}",
            f"container_attach_socket_dir = {q(str(run / 'attach'))}",
            f"decryption_keys_path = {q(str(base / 'keys'))}",
            f"hooks_dir = {toml_list([str(base / 'hooks.d')])}",
            f"cdi_spec_dirs = {toml_list([str(base / 'cdi')])}",
            f"irqbalance_config_file = {q(str(base / 'irqbalance'))}",
            'irqbalance_config_restore_file = "disable"',
            "",
            "[crio.runtime.runtimes.runc]",
            f"runtime_path = {q(str(self.runc))}",
            'runtime_type = "oci"',
            f"runtime_root = {q(str(run / 'runc'))}",
            f"monitor_path = {q(CONMON)}",
            'monitor_cgroup = "pod"',
            "",
            "[crio.image]",
            f"pause_image = {q(self.pause_image)}",
            f"signature_policy = {q(str(self.policy_path))}",
            f"signature_policy_dir = {q(str(base / 'policies'))}",
            f"big_files_temporary_dir = {q(str(base / 'tmp'))}",
        ]
        if self.pinned_images:
            lines.append(f"pinned_images = {toml_list(self.pinned_images)}")
        lines += [
            "",
            "[crio.network]",
            f"network_dir = {q(str(base / 'cni' / 'net.d'))}",
            f"plugin_dirs = {toml_list([CNI_PLUGIN_DIR])}",
            "",
            "[crio.metrics]",
            "enable_metrics = false",
            "",
            "[crio.nri]",
            "enable_nri = false",
            f"nri_listen = {q(str(run / 'nri.sock'))}",
        ]
        return "\n".join(lines) + "\n"

    def view(self) -> CrioView:
        """The paths crio is given: the private ones under ``base_dir``."""
        return CrioView(str(self.config_path), str(self.dropin_dir), str(self.root_dir / "storage"),
                        str(self.run_dir / "storage"), self.address)

    def render_registries(self) -> str:
        lines = ["unqualified-search-registries = []", 'short-name-mode = "enforcing"', ""]
        for prefix in self.registry_prefixes:
            # location, not a mirror: a pull that misses the loopback registry fails here
            # instead of falling back to the network.
            lines += ["[[registry]]", f"prefix = {json.dumps(prefix)}", f"location = {json.dumps(self.registry_host)}",
                      "insecure = true", ""]
        return "\n".join(lines)

    def write_config(self) -> None:
        for path in (
            self.root_dir, self.run_dir, self.dropin_dir, self.base_dir / "registries.conf.d",
            self.base_dir / "pod-logs", self.base_dir / "keys", self.base_dir / "hooks.d", self.base_dir / "cdi",
            self.base_dir / "policies", self.base_dir / "tmp", self.base_dir / "cni" / "net.d",
        ):
            path.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.render_config())
        self.registries_conf.write_text(self.render_registries())
        self.policy_path.write_text(json.dumps({"default": [{"type": "insecureAcceptAnything"}]}) + "\n")
        # containers/storage refuses a storage.conf without roots ("runroot must be set").
        seen = self.view()
        (self.base_dir / "storage.conf").write_text(
            f"[storage]\ndriver = {json.dumps(self.storage_driver)}\nrunroot = {json.dumps(seen.runroot)}\n"
            f"graphroot = {json.dumps(seen.root)}\n"
        )
        (self.base_dir / "containers.conf").write_text("")

    def write_dropin(self, name: str, text: str) -> pathlib.Path:
        """Write ``<dropin_dir>/<name>`` (``name`` may hold subdirectories) at once; no reload.

        CRI-O reads every file of the directory, hidden or not, so the text is written outside
        it and renamed in: a reload never sees half a file or an editor's temporary name.
        """
        path = self.dropin_dir / name
        if self.dropin_dir not in path.resolve().parents:
            raise ValueError(f"drop-in {name!r} is not inside {self.dropin_dir}")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, staging = tempfile.mkstemp(prefix="dropin.", dir=self.base_dir)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(staging, path)
        return path

    def remove_dropins(self) -> None:
        """Empty the drop-in directory (no reload)."""
        shutil.rmtree(self.dropin_dir, ignore_errors=True)
        self.dropin_dir.mkdir(parents=True, exist_ok=True)

    # --- process ---------------------------------------------------------------------------

    def crio_argv(self) -> list[str]:
        seen = self.view()
        return [
            str(self.binary),
            f"--config={seen.config}",
            f"--config-dir={seen.config_dir}",
            f"--root={seen.root}",
            f"--runroot={seen.runroot}",
            f"--listen={seen.listen}",
            f"--registries-conf={self.registries_conf}",
            f"--registries-conf-dir={self.base_dir / 'registries.conf.d'}",
            f"--log-level={self.log_level}",
        ]

    def argv(self) -> list[str]:
        return ["unshare", "--mount", "--propagation", "slave", "/bin/sh", "-c", NAMESPACE_SCRIPT, "crio-ns",
                *self.crio_argv()]

    def _namespace_binds(self) -> str:
        pairs = []
        for host_dir in HIDDEN_HOST_DIRS:
            private = self.host_dir / host_dir.strip("/").replace("/", "-")
            private.mkdir(parents=True, exist_ok=True)
            pairs.append(f"{private}={host_dir}")
        controllers = cgroups_as_mounted()
        if controllers is not None:
            copy = self.host_dir / "proc-cgroups"
            copy.write_text(controllers)
            pairs.append(f"{copy}=/proc/cgroups")
        if any(" " in pair or pair.count("=") != 1 for pair in pairs):
            raise CrioError(f"paths under {self.base_dir} must not hold spaces or '='")
        return " ".join(pairs)

    def environment(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if key not in _DROPPED_ENV}
        env["PINCTL_CRIO_BINDS"] = self._namespace_binds()
        env["CONTAINERS_STORAGE_CONF"] = str(self.base_dir / "storage.conf")
        env["CONTAINERS_CONF"] = str(self.base_dir / "containers.conf")
        # No proxy: the registry is on loopback, and nothing here may leave it.
        for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
            env.pop(key, None)
        return env

    def start(self) -> CrioDaemon:
        """Write the config, start crio and wait until its CRI answers ``Version``."""
        if self.is_alive():
            return self
        for tool in ("unshare", "setpriv", CONMON):
            if shutil.which(tool) is None:
                raise CrioError(f"{tool} not found (util-linux, conmon: scripts/test-packages.txt)")
        if not os.access(self.pinns, os.X_OK):
            raise CrioError(f"pinns is missing beside {self.binary}: delete {self.binary.parent.parent} to rebuild")
        self.write_config()
        env = self.environment()
        if not self.host_before:
            self.host_before = host_snapshot()
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                ctd.dying_with_parent(self.argv()), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env=env,
            )
        self.pid = self._proc.pid
        _RUNNING[self.pid] = self
        self._wait_ready()
        return self

    def stop(self) -> None:
        """SIGTERM, wait, then SIGKILL; repeatable."""
        proc, self._proc = self._proc, None
        pid, self.pid = self.pid, None
        if proc is None or pid is None:
            return
        _RUNNING.pop(pid, None)
        if proc.poll() is None:
            ctd._signal(pid, signal.SIGTERM)
            try:
                proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                ctd._signal(pid, signal.SIGKILL)
                proc.wait(STOP_GRACE_S)
        with contextlib.suppress(OSError):
            os.unlink(self.address)
        for path in self._temp_dirs:
            shutil.rmtree(path, ignore_errors=True)
        self._temp_dirs.clear()

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def wait_exited(self, timeout: float = STOP_GRACE_S) -> bool:
        """Whether crio exits (by itself: a crash) within ``timeout``."""
        if self._proc is None:
            return True
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:]) or "(no log)"

    def reload(self, timeout: float = RELOAD_TIMEOUT_S) -> float:
        """SIGHUP crio and wait until it logs that the reload completed; returns the seconds it took.

        CRI-O logs "Configuration reload completed" after it has compiled the new pin
        patterns (server.go's reload watcher), so what ListImages says next is the new state.
        A reload that fails (a drop-in that does not parse) raises with CRI-O's message.
        """
        if self.pid is None or not self.is_alive():
            raise CrioError(f"{self.engine} is not running")
        text = self.log_text()
        done, failed = text.count(RELOADED), text.count(RELOAD_FAILED)
        began = time.monotonic()
        os.kill(self.pid, signal.SIGHUP)
        deadline = began + timeout
        while time.monotonic() < deadline and self.is_alive():
            text = self.log_text()
            if text.count(RELOADED) > done:
                return time.monotonic() - began
            if text.count(RELOAD_FAILED) > failed:
                raise CrioError(f"{self.engine} refused the reload:\n{self.log_tail()}")
            time.sleep(0.02)
        if not self.is_alive():
            raise CrioError(f"{self.engine} exited during the reload\n{self.log_tail()}")
        raise CrioError(f"{self.engine} did not log {RELOADED!r} within {timeout:.0f}s\n{self.log_tail()}")

    def version(self) -> tuple[str, str, str]:
        """The CRI Version call straight over gRPC: (version, runtime_name, runtime_version)."""
        reply = Reader(cri.unary_call(self.address, VERSION, b""))
        # VersionResponse: version (1), runtime_name (2), runtime_version (3).
        return reply.text(1), reply.text(2), reply.text(3)

    def list_images(self) -> list[cri.CriImage]:
        return cri.list_images(self.address)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = ""
        while time.monotonic() < deadline and self.is_alive():
            if os.path.exists(self.address):
                try:
                    _, self.runtime_name, self.runtime_version = self.version()
                except cri.CriError as exc:
                    last = str(exc)
                else:
                    return
            time.sleep(0.1)
        state = "not answering" if self.is_alive() else "exited"
        self.stop()
        raise CrioError(f"{self.engine} {state} at {self.address} ({last})\n--- log tail ---\n{self.log_tail()}")

    def _socket_dir(self) -> pathlib.Path:
        preferred = self.base_dir / "s"
        if len(str(preferred / "crio.sock")) <= ctd.MAX_SOCKET_PATH:
            preferred.mkdir(parents=True, exist_ok=True)
            return preferred
        # Deep pytest temp dirs can overflow sun_path; /tmp is not under any of the binds.
        fallback = pathlib.Path(tempfile.mkdtemp(prefix="crio-", dir="/tmp"))
        self._temp_dirs.append(fallback)
        return fallback


if __name__ == "__main__":
    # ``python -m tests.harness.crio``: build (or find) crio and pinns, printing each step.
    print(binary())

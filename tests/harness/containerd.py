"""Private containerd daemons for integration tests and the sandbox.

Each daemon gets its own root, state, sockets and config, so several can run
side by side and none touches the host's /var/lib/containerd or /run/containerd.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import pathlib
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping

from tests.harness import cri, debs, engines, gobuild, images

DEFAULT_SANDBOX_IMAGE = "example.test/pause:3.9"
CRI_NAMESPACE = cri.NAMESPACE
READY_TIMEOUT_S = 15.0
STOP_GRACE_S = 5.0
CTR_TIMEOUT_S = 120.0
# sun_path is 108 bytes on Linux; stay well below so ".ttrpc" suffixes fit too.
MAX_SOCKET_PATH = 100

# Plugins that only log errors or warnings when their backend is absent.
# Names unknown to one version are ignored by containerd.
NOISY_PLUGINS = (
    "io.containerd.snapshotter.v1.aufs",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.blockfile",
    "io.containerd.tracing.processor.v1.otlp",
    "io.containerd.internal.v1.tracing",
    # 2.x: erofs needs mkfs.erofs and kernel support, and warns without them.
    "io.containerd.snapshotter.v1.erofs",
    "io.containerd.differ.v1.erofs",
)

# containerd 2.x (config version 3) split the CRI plugin in three.
V3_IMAGES_TABLE = "[plugins.'io.containerd.cri.v1.images']"
V3_RUNTIME_TABLE = "[plugins.'io.containerd.cri.v1.runtime']"
V3_GRPC_TABLE = "[plugins.'io.containerd.grpc.v1.cri']"


CNI_CONFLIST = json.dumps(
    {"cniVersion": "0.4.0", "name": "pinctl-test", "plugins": [{"type": "loopback"}]}
)


class DaemonError(RuntimeError):
    """A private containerd failed to start, answer or stop."""


_RUNNING: dict[int, ContainerdDaemon] = {}


def _stop_all() -> None:
    for daemon in list(_RUNNING.values()):
        daemon.stop()


atexit.register(_stop_all)


class ContainerdDaemon:
    """One containerd process with private paths under ``base_dir``."""

    def __init__(
        self,
        engine: str,
        base_dir: pathlib.Path,
        sandbox_image: str = DEFAULT_SANDBOX_IMAGE,
        *,
        detached: bool = False,
        data_dir: pathlib.Path | None = None,
    ) -> None:
        self.engine = engine
        self.base_dir = pathlib.Path(base_dir).resolve()
        # root/state may live elsewhere (tmpfs): bolt fsyncs dominate big imports.
        self.data_dir = pathlib.Path(data_dir).resolve() if data_dir else self.base_dir
        self.sandbox_image = sandbox_image
        # 2.x only: entries of the CRI's pinned_images beside its sandbox one (name -> reference).
        self.pinned_images: dict[str, str] = {}
        # A detached daemon outlives this process (the sandbox); never reap it at exit.
        self.detached = detached
        self.bin_dir = engine_bin_dir(engine)
        self.socket_dir = _socket_dir(self.base_dir)
        self.address = str(self.socket_dir / "containerd.sock")
        # Not "config.toml": the sandbox keeps the pinctl policy under that name.
        self.config_path = self.base_dir / "containerd.toml"
        self.log_path = self.base_dir / "containerd.log"
        self.pid: int | None = None
        self.version = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ContainerdDaemon:
        """Write the config, launch containerd and wait until it answers."""
        if self.pid is not None and self.is_alive():
            return self
        self.write_config()
        with open(self.log_path, "ab") as log:
            argv = [str(self.bin_dir / "containerd"), "--config", str(self.config_path)]
            self._proc = subprocess.Popen(
                argv if self.detached else dying_with_parent(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=self.detached,
                env=self.child_env(),
            )
        self.pid = self._proc.pid
        if not self.detached:
            _RUNNING[self.pid] = self
        self._wait_ready()
        return self

    def child_env(self) -> dict[str, str] | None:
        """The daemon's environment; None inherits ours (a daemon running pods needs its shim on PATH).
        A Go-built engine's shim is beside its containerd, found first."""
        if self.engine not in engines.go_engines():
            return None
        return {**os.environ, "PATH": os.pathsep.join((str(self.bin_dir), os.environ.get("PATH", "")))}

    def adopt(self, pid: int) -> ContainerdDaemon:
        """Take over an already running daemon of this config (the sandbox re-uses one)."""
        if not _is_our_process(pid, self.config_path):
            raise DaemonError(f"pid {pid} is not containerd with config {self.config_path}")
        self.pid = pid
        self._wait_ready()
        return self

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period; safe to call repeatedly."""
        pid, self.pid = self.pid, None
        if pid is None:
            return
        _RUNNING.pop(pid, None)
        if self._proc is None and not _is_our_process(pid, self.config_path):
            return
        _signal(pid, signal.SIGTERM)
        if not self._wait_exit(pid, STOP_GRACE_S):
            _signal(pid, signal.SIGKILL)
            self._wait_exit(pid, STOP_GRACE_S)
        self._proc = None

    def restart(self) -> ContainerdDaemon:
        self.stop()
        return self.start()

    def is_alive(self) -> bool:
        if self.pid is None:
            return False
        if self._proc is not None:
            return self._proc.poll() is None
        return _is_our_process(self.pid, self.config_path)

    def ctr(
        self, *args: str, namespace: str = CRI_NAMESPACE, check: bool = True, timeout: float = CTR_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        """Run this engine's own ``ctr`` against this daemon."""
        argv = [str(self.bin_dir / "ctr"), "-a", self.address, "-n", namespace, *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise DaemonError(f"{' '.join(argv[3:])} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def images(self, namespace: str = CRI_NAMESPACE) -> list[CtrImage]:
        """``ctr images ls`` parsed into records."""
        lines = self.ctr("images", "ls", namespace=namespace).stdout.splitlines()
        return [_parse_image_line(line) for line in lines[1:] if line.strip()]

    def remove_images(self, refs: list[str], namespace: str = CRI_NAMESPACE) -> None:
        # Chunked so thousands of refs never approach ARG_MAX.
        for start in range(0, len(refs), 500):
            self.ctr("images", "rm", *refs[start : start + 500], namespace=namespace, check=False)

    def collect_garbage(self, namespace: str = CRI_NAMESPACE) -> None:
        """Have containerd delete now every blob no image holds: its collector runs on its own
        after a deletion, later on a busy machine, and a blob it has not collected yet is still
        there for the next import to find. A record made and removed with --sync waits for a
        whole collection (it marks and sweeps everything, not the one image)."""
        names = self.ctr("images", "ls", "-q", namespace=namespace).stdout.split()
        if not names:
            return
        scratch = "example.test/harness/collect-garbage:now"
        self.ctr("images", "tag", "--force", names[0], scratch, namespace=namespace)
        self.ctr("images", "rm", "--sync", scratch, namespace=namespace)

    def clear_images(self, namespace: str = CRI_NAMESPACE, timeout: float = 30.0) -> None:
        """Remove every image in ``namespace``; in ``k8s.io`` also wait for the CRI to agree.

        Repeats because the CRI may still be adding ``sha256:<id>`` refs for
        images it had not finished adopting when the first listing was taken.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            refs = self.ctr("images", "ls", "-q", namespace=namespace).stdout.split()
            self.remove_images(refs, namespace)
            if namespace != CRI_NAMESPACE:
                return
            try:
                cri.wait_for(self.address, lambda listed: not listed, timeout=2.0)
            except cri.CriError:
                continue
            if not self.ctr("images", "ls", "-q", namespace=namespace).stdout.split():
                return
        raise DaemonError(f"could not empty namespace {namespace} in {timeout}s")

    def label_image(self, ref: str, labels: Mapping[str, str], namespace: str = CRI_NAMESPACE) -> None:
        """``ctr images label``; an empty value removes that label."""
        pairs = [f"{key}={value}" for key, value in labels.items()]
        self.ctr("images", "label", ref, *pairs, namespace=namespace)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def write_config(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.render_config())
        # CRI logs an error at start-up without any network config; a parse-only
        # loopback list quiets it (no CNI binary is ever run: no pods start here).
        cni_conf = self.base_dir / "cni" / "conf"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-pinctl.conflist").write_text(CNI_CONFLIST)
        if self.config_version >= 4:
            self.conf_d.mkdir(exist_ok=True)

    @property
    def conf_d(self) -> pathlib.Path:
        """The directory whose ``*.toml`` a version 4 config imports (drop-ins of a test's own)."""
        return self.base_dir / "conf.d"

    @property
    def config_version(self) -> int:
        """The config schema this engine reads: 4 for containerd 2.4, 3 for 2.1, 2 for 1.x."""
        return config_version(self.engine)

    def render_config(self) -> str:
        if self.config_version >= 4:
            return self._render_v4()
        return self._render_v3() if self.config_version >= 3 else self._render_v2()

    def _render_v2(self) -> str:
        q = json.dumps  # TOML basic strings accept JSON string escapes.
        base = self.base_dir
        cri_table = '[plugins."io.containerd.grpc.v1.cri"]'
        return "\n".join(
            [
                "version = 2",
                f"root = {q(str(self.data_dir / 'root'))}",
                f"state = {q(str(self.data_dir / 'state'))}",
                f"disabled_plugins = {json.dumps(list(NOISY_PLUGINS))}",
                "",
                "[grpc]",
                f"  address = {q(self.address)}",
                "[ttrpc]",
                f"  address = {q(self.address + '.ttrpc')}",
                "[debug]",
                f"  address = {q(str(self.socket_dir / 'debug.sock'))}",
                '  level = "info"',
                "",
                cri_table,
                f"  sandbox_image = {q(self.sandbox_image)}",
                f"{cri_table[:-1]}.containerd]",
                '  snapshotter = "native"',
                # Private CNI dirs, so the host's network config is never read.
                f"{cri_table[:-1]}.cni]",
                f"  bin_dir = {q(str(base / 'cni' / 'bin'))}",
                f"  conf_dir = {q(str(base / 'cni' / 'conf'))}",
                # The opt plugin would otherwise create /opt/containerd on the host.
                '[plugins."io.containerd.internal.v1.opt"]',
                f"  path = {q(str(base / 'opt'))}",
                "",
            ]
        )

    def _render_v3(self) -> str:
        """The same daemon for containerd 2.x: every default that reads or writes a host
        path (``containerd config default`` of 2.1.9) is pointed below ``base_dir`` or off."""
        q = json.dumps
        return "\n".join(
            [
                "version = 3",
                f"root = {q(str(self.data_dir / 'root'))}",
                f"state = {q(str(self.data_dir / 'state'))}",
                f"disabled_plugins = {json.dumps(list(NOISY_PLUGINS))}",
                "",
                "[grpc]",
                f"  address = {q(self.address)}",
                "[ttrpc]",
                f"  address = {q(self.address + '.ttrpc')}",
                "[debug]",
                f"  address = {q(str(self.socket_dir / 'debug.sock'))}",
                '  level = "info"',
                "",
                *self._cri_tables(["  enable_cdi = false"]),
            ]
        )

    def _render_v4(self) -> str:
        """containerd 2.4 (config version 4): the server addresses moved from [grpc], [ttrpc] and
        [debug] to server plugins (2.4.2's serviceMigrate; [debug] keeps the level); the CRI
        tables are version 3's. The main file imports conf.d/*.toml, as a node's often does."""
        q = json.dumps
        return "\n".join(
            [
                "version = 4",
                f"root = {q(str(self.data_dir / 'root'))}",
                f"state = {q(str(self.data_dir / 'state'))}",
                f"disabled_plugins = {json.dumps(list(NOISY_PLUGINS))}",
                f"imports = [{q(str(self.conf_d / '*.toml'))}]",
                "",
                "[debug]",
                '  level = "info"',
                "[plugins.'io.containerd.server.v1.grpc']",
                f"  address = {q(self.address)}",
                "[plugins.'io.containerd.server.v1.ttrpc']",
                f"  address = {q(self.address + '.ttrpc')}",
                "[plugins.'io.containerd.server.v1.debug']",
                f"  address = {q(str(self.socket_dir / 'debug.sock'))}",
                "",
                # 2.4 has no enable_cdi (it warns of an unknown key): CDI specs come from a directory of ours.
                *self._cri_tables([f"  cdi_spec_dirs = [{q(str(self.base_dir / 'cdi'))}]"]),
            ]
        )

    def _cri_tables(self, cdi: list[str]) -> list[str]:
        """The plugin tables of config versions 3 and 4 (the CRI split in three, and the rest);
        ``cdi``: the runtime plugin's lines that keep it from reading /etc/cdi and /var/run/cdi."""
        q = json.dumps
        base = self.base_dir
        return [
            V3_IMAGES_TABLE,
            '  snapshotter = "native"',
            f"{V3_IMAGES_TABLE[:-1]}.pinned_images]",
            f"  sandbox = {q(self.sandbox_image)}",
            *(f"  {q(name)} = {q(ref)}" for name, ref in self.pinned_images.items()),
            V3_RUNTIME_TABLE,
            # Its default reads CDI specs from /etc/cdi and /var/run/cdi; no device is needed.
            *cdi,
            f"{V3_RUNTIME_TABLE[:-1]}.cni]",
            f"  bin_dirs = [{q(str(base / 'cni' / 'bin'))}]",
            f"  conf_dir = {q(str(base / 'cni' / 'conf'))}",
            # Streaming (exec, attach) stays on loopback, as the default has it; said here so
            # a changed default cannot widen it.
            V3_GRPC_TABLE,
            '  stream_server_address = "127.0.0.1"',
            '  stream_server_port = "0"',
            '[plugins."io.containerd.internal.v1.opt"]',
            f"  path = {q(str(base / 'opt'))}",
            # NRI is on by default in 2.x and would listen on /var/run/nri/nri.sock.
            '[plugins."io.containerd.nri.v1.nri"]',
            "  disable = true",
            f"  socket_path = {q(str(self.socket_dir / 'nri.sock'))}",
            '[plugins."io.containerd.image-verifier.v1.bindir"]',
            f"  bin_dir = {q(str(base / 'image-verifier'))}",
            # 2.x's CRI pulls through the transfer service, which unpacks only for the
            # (platform, snapshotter) pairs listed here; its default lists overlayfs alone, so
            # with the CRI's native snapshotter every PullImage failed ("Unpack configuration
            # not supported, skipping", then "no unpack platforms defined").
            "[[plugins.'io.containerd.transfer.v1.local'.unpack_config]]",
            f"  platform = {q(images.host_platform())}",
            '  snapshotter = "native"',
            "",
        ]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = ""
        while time.monotonic() < deadline:
            if not self.is_alive():
                break
            if os.path.exists(self.address):
                proc = self.ctr("version", check=False, timeout=5)
                if proc.returncode == 0:
                    self.version = _server_version(proc.stdout)
                    return
                last = proc.stderr.strip()
            time.sleep(0.1)
        alive = self.is_alive()
        self.stop()
        state = "not answering" if alive else "exited"
        raise DaemonError(
            f"{self.engine} {state} at {self.address} ({last})\n--- log tail ---\n{self.log_tail()}"
        )

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        if self._proc is not None:
            try:
                self._proc.wait(timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _pid_exists(pid):
                return True
            time.sleep(0.05)
        return False


@dataclasses.dataclass(frozen=True)
class CtrImage:
    """One row of ``ctr images ls``."""

    ref: str
    media_type: str
    digest: str
    size: str
    platforms: tuple[str, ...]
    labels: dict[str, str]


def _parse_image_line(line: str) -> CtrImage:
    # SIZE is two tokens ("836.0 B"); LABELS is last and comma-separated.
    tokens = line.split()
    ref, media_type, digest = tokens[:3]
    platforms = () if tokens[5] == "-" else tuple(tokens[5].split(","))
    labels_text = " ".join(tokens[6:])
    labels: dict[str, str] = {}
    if labels_text not in ("", "-"):
        for pair in labels_text.split(","):
            key, _, value = pair.partition("=")
            labels[key] = value
    return CtrImage(ref, media_type, digest, f"{tokens[3]} {tokens[4]}", platforms, labels)


def with_pod_settings_v3(config: str, runc: pathlib.Path, runc_root: pathlib.Path) -> str:
    """A version 3 or 4 config with what ``pods.PodsDaemon`` needs to run pods (see pods.py for
    why each): in 2.x ``restrict_oom_score_adj`` and the runc runtime belong to the CRI's
    runtime plugin, ``stats_collect_period`` (seconds, an int) to its images plugin. Version 4
    (2.4.2) keeps these tables as they are; its runtime plugin has a ``stats_collect_period`` of
    its own (a duration, for CPU usage), which is not this one."""
    lines = config.splitlines()
    for table, setting in (
        (V3_RUNTIME_TABLE, "  restrict_oom_score_adj = true"),
        (V3_IMAGES_TABLE, "  stats_collect_period = 1"),
    ):
        if table not in lines:
            raise RuntimeError(f"containerd config has no {table} table to extend")
        lines.insert(lines.index(table) + 1, setting)
    runc_table = f"{V3_RUNTIME_TABLE[:-1]}.containerd.runtimes.runc]"
    lines += [
        runc_table,
        '  runtime_type = "io.containerd.runc.v2"',
        f"{runc_table[:-1]}.options]",
        f"  BinaryName = {json.dumps(str(runc))}",
        f"  Root = {json.dumps(str(runc_root))}",
        "",
    ]
    return "\n".join(lines)


def config_version(engine: str) -> int:
    """``containerd-2.4`` -> 4, ``containerd-2.1`` -> 3, ``containerd-1.7`` -> 2: the schema its
    release writes (2.4.2's version.ConfigVersion is 4, 2.1's 3; the table has no 2.2 or 2.3)."""
    try:
        major, minor = (int(part) for part in engine.rsplit("-", 1)[-1].split(".")[:2])
    except ValueError:
        return 2
    if major < 2:
        return 2
    return 4 if (major, minor) >= (2, 4) else 3


def engine_bin_dir(engine: str) -> pathlib.Path:
    """Where an engine's containerd and ctr are: a Go-built engine's bin/ (fetched or built on
    first use, its runc shim beside them), or the unpacked Debian package's usr/bin."""
    if engine in engines.go_engines():
        return gobuild.binary(engine).parent
    return debs.engine_dir(engine) / "usr" / "bin"


def dying_with_parent(argv: list[str], signal_name: str = "TERM") -> list[str]:
    """``argv`` run through setpriv, which gives it the parent-death signal and execs it (same pid).

    atexit never runs when pytest itself is SIGKILLed or SIGTERMed, which would leave orphan
    daemons; the kernel's parent-death signal covers that. Not set from a preexec_fn: Python code
    between fork and exec, in a process full of gRPC threads, let gRPC's fork handler restart its
    poller in the child, which then died before the exec (seen with the kubelet, two CI runs in five).
    """
    return ["setpriv", "--pdeathsig", signal_name, *argv]


def terminate(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; waits for the exit either way."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(grace_s)


def _socket_dir(base_dir: pathlib.Path) -> pathlib.Path:
    preferred = base_dir / "s"
    if len(str(preferred / "containerd.sock.ttrpc")) <= MAX_SOCKET_PATH:
        return preferred
    # Deep temp dirs (pytest's) can exceed sun_path; fall back to a short one.
    return pathlib.Path(tempfile.mkdtemp(prefix="ctd-", dir="/tmp"))


def _server_version(ctr_version_output: str) -> str:
    server = ctr_version_output.split("Server:", 1)[-1]
    match = re.search(r"Version:\s*v?(\d+\.\d+\.\d+)", server)
    return match.group(1) if match else ""


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still "exists" for kill(0); treat it as gone.
    return _proc_state(pid) not in ("Z", "")


def _proc_state(pid: int) -> str:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[0]


def _is_our_process(pid: int, config_path: pathlib.Path) -> bool:
    """True when ``pid`` is a live containerd started with ``config_path``.

    Guards kill-by-PID against a recycled PID belonging to something else.
    """
    if not _pid_exists(pid):
        return False
    try:
        argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(config_path).encode() in argv

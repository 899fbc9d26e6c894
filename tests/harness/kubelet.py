"""A kubelet for integration tests: standalone by default (no API server, static pods, any CRI socket),
or registered to the harness's control plane (:class:`Registration`, tests/harness/cluster_nodes.py).

The binary comes from ``kubernetes_build.py`` (built once per machine). :class:`Kubelet` writes a
``KubeletConfiguration`` file and starts it with its own root dir, so several can run side by side
and none reads or writes the host's ``/var/lib/kubelet`` or ``/etc/kubernetes``:

* no kubeconfig, so the kubelet runs standalone and takes pods only from ``staticPodPath``
  (re-read every second); pods use the host network, so no CNI plugin is ever run;
* ``cgroupDriver: cgroupfs`` like the harness's runc, ``cgroupsPerQOS: false`` (and so
  ``enforceNodeAllocatable: [none]``), so the kubelet creates no ``kubepods`` cgroups on this
  host; ``failCgroupV1: false`` where ``/sys/fs/cgroup`` is v1; ``failSwapOn: false``;
* its server and healthz on 127.0.0.1 at free ports, the read-only port off, anonymous
  authentication with ``AlwaysAllow`` (nothing but loopback can reach it);
* ``makeIPTablesUtilChains: false`` (else it adds KUBE-FIREWALL rules to the host's INPUT and
  OUTPUT chains), ``oomScoreAdj: 0`` (root here lacks CAP_SYS_RESOURCE to lower it);
* its own mount namespace (``unshare --mount --propagation slave``), where private directories
  are bound over ``/var/lib`` and ``/var/log`` (it writes ``/var/lib/kubelet/device-plugins``,
  empties it, and ``/var/log/containers`` whatever ``--root-dir`` says), its bind mount of the
  root dir stays private, and the six kernel settings it insists on read as it wants them from
  files bound over ``/proc/sys``. With ``protectKernelDefaults: true`` it checks them and would
  refuse to start rather than change this machine's kernel settings.

Registered (a :class:`Registration`): ``--kubeconfig`` (``ControlPlane.node_kubeconfig``),
``registerNode``, ``--node-ip`` and ``--hostname-override`` naming the node. The kubelet refuses a
loopback node IP (``validateNodeIP``: 127/8), so each node has a /32 of 198.18.0.0/15 (RFC 2544's
benchmarking range, never routed) that the harness adds to ``lo``; the kubelet's server listens
there (the apiserver reaches it for logs), healthz stays on 127.0.0.1. ``syncFrequency`` and
``configMapAndSecretChangeDetectionStrategy`` are set from the registration (defaults 1m, Watch:
the kubelet's own). With ``mount_namespace`` the kubelet joins a namespace its node made (nsenter)
instead of making its own; that node binds the same private directories and tunables
(:meth:`Kubelet.namespace_binds`) and containerd's paths, so containerd and the kubelet see one
``/run/containerd`` and ``/var/lib/containerd``.

Image GC facts read from ``pkg/kubelet`` (1.37) that the tests rely on:

* ``GarbageCollect`` runs once when the kubelet starts, then every ``ImageGCPeriod`` (5 minutes,
  a constant). The first run cannot delete anything: it is the detection pass that first sees
  every image, so each image's age is 0, below any ``imageMinimumGCAge`` (a zero one in the file
  is defaulted to 2m). Records live in memory only; a restart starts over.
* The eviction manager checks every 10 s; under imagefs pressure (``evictionHard``
  ``imagefs.available``) it removes dead containers, then calls ``DeleteUnusedImages``: the
  same eviction order and minimum age, no byte limit. That is how a test makes the image GC run
  within seconds (:meth:`Kubelet.wait_for_removals`).
* Each deletion is logged at level 0 as ``"Removing image to free bytes" imageID="..."
  size=N``, in deletion order. Level 5 adds each detection pass (``"Image ID is new"``,
  ``"Setting Image ID lastUsed"``), which tests read to know what the kubelet has seen.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import datetime
import json
import os
import pathlib
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Optional

from tests.harness import containerd as ctd
from tests.harness import cri, kubernetes_build, pods, runnable
from tests.harness.ports import free_port

READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
LOG_POLL_S = 0.2
# What the kubelet wants these read as (pkg/kubelet/cm setupKernelTunables); it would write them.
KERNEL_TUNABLES = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
# Host directories the kubelet writes into whatever --root-dir says (the device plugin socket
# dir, container log links); private ones are bound over them in its namespace.
HIDDEN_HOST_DIRS = ("/var/lib", "/var/log")
# No proxy from the environment: the kubelet is on loopback, and nothing here leaves it.
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))
REMOVAL = re.compile(r'"Removing image to free bytes" imageID="(?P<id>[^"]+)" size=(?P<size>\d+)')
# klog's header: Lmmdd hh:mm:ss.uuuuuu
KLOG_TIME = re.compile(r"[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6})")

# Runs inside the new mount namespace, then becomes the kubelet (same PID, so signals reach it).
NAMESPACE_SCRIPT = r"""
set -eu
bind() { mount --bind "$1" "$2"; }
for pair in $PINCTL_KUBELET_BINDS; do bind "${pair%%=*}" "${pair#*=}"; done
exec "$@"
"""


class KubeletError(RuntimeError):
    """The kubelet did not start, answer or stop as expected."""


@dataclasses.dataclass(frozen=True)
class GcPolicy:
    """The image GC fields of the KubeletConfiguration (Go durations as strings)."""

    high_threshold_percent: int = 85
    low_threshold_percent: int = 80
    min_age: str = "2m"
    max_age: str = "0s"

    def config(self) -> dict[str, object]:
        return {
            "imageGCHighThresholdPercent": self.high_threshold_percent,
            "imageGCLowThresholdPercent": self.low_threshold_percent,
            "imageMinimumGCAge": self.min_age,
            "imageMaximumGCAge": self.max_age,
        }


@dataclasses.dataclass(frozen=True)
class Registration:
    """What a kubelet that registers to an API server adds to the standalone configuration."""

    kubeconfig: pathlib.Path
    node_ip: str  # not loopback (the kubelet refuses 127/8); on an interface of this machine
    # How often each pod is synced again (its ConfigMap volumes rewritten among the rest); the
    # kubelet's defaults are 1m and Watch.
    sync_frequency: str = "1m"
    change_detection: str = "Watch"
    # registerWithTaints: keeps pods that do not tolerate them off the node.
    taints: tuple[Mapping[str, str], ...] = ()
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class StaticPod:
    """A host-network pod whose one container runs ``command`` from a local image."""

    name: str
    image: str
    command: tuple[str, ...] = ("/bin/busybox", "sleep", "3600")
    container: str = "main"
    # "Never" with a command that ends leaves an exited container the pod keeps.
    restart_policy: str = "Always"
    # ImageVolume: images mounted read-only at /volumes/<index> (reference, pull policy Never).
    image_volumes: tuple[str, ...] = ()
    # "IfNotPresent" makes the kubelet pull the image (and write its pull record) when it is missing.
    pull_policy: str = "Never"

    def manifest(self) -> dict[str, object]:
        container: dict[str, object] = {
            "name": self.container,
            "image": self.image,
            "command": list(self.command),
            # "Never" unless the pod's image is in a loopback registry: imported before the pod is written.
            "imagePullPolicy": self.pull_policy,
        }
        spec: dict[str, object] = {"hostNetwork": True, "containers": [container], "terminationGracePeriodSeconds": 0,
                                   "restartPolicy": self.restart_policy}
        if self.image_volumes:
            names = [f"image-{index}" for index in range(len(self.image_volumes))]
            spec["volumes"] = [{"name": name, "image": {"reference": ref, "pullPolicy": "Never"}}
                               for name, ref in zip(names, self.image_volumes)]
            container["volumeMounts"] = [{"name": name, "mountPath": f"/volumes/{index}"}
                                         for index, name in enumerate(names)]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": self.name, "namespace": "default"}, "spec": spec}


@dataclasses.dataclass(frozen=True)
class Removal:
    """One ``Removing image to free bytes`` line: what the kubelet deleted, in its order."""

    image_id: str
    size: int
    at: str  # klog's time of day, for messages


def cgroup_v1() -> bool:
    """True unless /sys/fs/cgroup is the unified (v2) hierarchy."""
    return not pathlib.Path("/sys/fs/cgroup/cgroup.controllers").exists()


_RUNNING: dict[int, Kubelet] = {}


def _stop_all() -> None:
    for kubelet in list(_RUNNING.values()):
        kubelet.stop()


atexit.register(_stop_all)


class Kubelet:
    """One standalone kubelet with private paths under ``base_dir``, talking to ``runtime_endpoint``."""

    def __init__(
        self,
        base_dir: pathlib.Path,
        runtime_endpoint: str,
        *,
        gc: GcPolicy = GcPolicy(),
        eviction_hard: Optional[Mapping[str, str]] = None,
        node_name: str = "pinctl-node",
        verbosity: int = 5,
        extra_config: Optional[Mapping[str, object]] = None,
        binary: Optional[pathlib.Path] = None,
        registration: Optional[Registration] = None,
        mount_namespace: Optional[str] = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.base_dir = pathlib.Path(base_dir).resolve()
        # A unix socket path or any endpoint the kubelet accepts (a proxy's socket later).
        self.runtime_endpoint = runtime_endpoint if "://" in runtime_endpoint else f"unix://{runtime_endpoint}"
        self.gc = gc
        # Empty: no eviction thresholds at all (the kubelet's defaults are not merged in).
        self.eviction_hard = dict(eviction_hard or {})
        self.node_name = node_name
        self.verbosity = verbosity
        self.extra_config = dict(extra_config or {})
        self.binary = binary or kubernetes_build.ensure_kubelet().binary
        self.registration = registration
        # A mount namespace's file (/proc/<pid>/ns/mnt) whose owner made namespace_binds() already.
        self.mount_namespace = mount_namespace
        # More command-line flags, after the harness's own (``--feature-gates=...``).
        self.extra_args = tuple(extra_args)
        self.root_dir = self.base_dir / "root"
        self.manifest_dir = self.base_dir / "manifests"
        self.config_path = self.base_dir / "kubelet.yaml"
        self.log_path = self.base_dir / "kubelet.log"
        self.port = 0
        self.healthz_port = 0
        self.pid: Optional[int] = None
        self.started_at = 0.0
        self._proc: Optional[subprocess.Popen[bytes]] = None

    # --- configuration -------------------------------------------------------------------------

    def config(self) -> dict[str, object]:
        """The KubeletConfiguration, as a dict (written as JSON, which is YAML)."""
        config: dict[str, object] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "containerRuntimeEndpoint": self.runtime_endpoint,
            "staticPodPath": str(self.manifest_dir),
            "fileCheckFrequency": "1s",
            "podLogsDir": str(self.base_dir / "pod-logs"),
            "volumePluginDir": str(self.base_dir / "volume-plugins"),
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": ["none"],
            "failSwapOn": False,
            "address": "127.0.0.1",
            "port": self.port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "makeIPTablesUtilChains": False,
            "protectKernelDefaults": True,
            "oomScoreAdj": 0,
            "resolvConf": "",
            "evictionHard": self.eviction_hard,
            "evictionPressureTransitionPeriod": "1s",
            **self.gc.config(),
        }
        if cgroup_v1():
            config["failCgroupV1"] = False
        if self.registration is not None:
            registration = self.registration
            config.update({
                "registerNode": True,
                "address": registration.node_ip,
                "syncFrequency": registration.sync_frequency,
                "configMapAndSecretChangeDetectionStrategy": registration.change_detection,
                "registerWithTaints": [dict(taint) for taint in registration.taints],
            })
        config.update(self.extra_config)
        return config

    def write_config(self) -> None:
        for path in (self.root_dir, self.manifest_dir, self.base_dir / "pod-logs", self.base_dir / "volume-plugins"):
            path.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(json.dumps(self.config(), indent=2) + "\n")

    def argv(self) -> list[str]:
        kubelet = [
            str(self.binary),
            f"--config={self.config_path}",
            f"--root-dir={self.root_dir}",
            f"--cert-dir={self.root_dir / 'pki'}",
            f"--hostname-override={self.node_name}",
            f"-v={self.verbosity}",
            *self.extra_args,
        ]
        if self.registration is not None:
            kubelet += [f"--kubeconfig={self.registration.kubeconfig}", f"--node-ip={self.registration.node_ip}"]
            if self.registration.labels:
                kubelet.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in self.registration.labels.items()))
        if self.mount_namespace is not None:
            # nsenter execs the kubelet in place (no --pid): same PID, so signals reach it.
            return ["nsenter", f"--mount={self.mount_namespace}", "--", *kubelet]
        return ["unshare", "--mount", "--propagation", "slave", "/bin/sh", "-c", NAMESPACE_SCRIPT, "kubelet-ns", *kubelet]

    def _namespace_binds(self) -> str:
        """``source=target`` pairs the namespace script binds: host dirs first, then the tunables."""
        pairs = [f"{source}={target}" for source, target in self.namespace_binds()]
        if any(" " in pair or pair.count("=") != 1 for pair in pairs):
            raise KubeletError(f"paths under {self.base_dir} must not hold spaces or '='")
        return " ".join(pairs)

    def namespace_binds(self) -> list[tuple[pathlib.Path, str]]:
        """(source, target) of each bind the kubelet's mount namespace needs, in order: private
        directories over :data:`HIDDEN_HOST_DIRS`, then files over the six kernel settings."""
        pairs: list[tuple[pathlib.Path, str]] = []
        for host_dir in HIDDEN_HOST_DIRS:
            private = self.base_dir / "host" / host_dir.strip("/").replace("/", "-")
            (private / "kubelet" if host_dir == "/var/lib" else private).mkdir(parents=True, exist_ok=True)
            pairs.append((private, host_dir))
        tunables = self.base_dir / "host" / "sysctl"
        for name, value in KERNEL_TUNABLES.items():
            path = tunables / name.replace("/", ".")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(value + "\n")
            pairs.append((path, f"/proc/sys/{name}"))
        return pairs

    # --- static pods ---------------------------------------------------------------------------

    def add_static_pod(self, pod: StaticPod) -> pathlib.Path:
        """Write the pod's manifest; the kubelet notices it within ``fileCheckFrequency``."""
        self.manifest_dir.mkdir(parents=True, exist_ok=True)
        path = self.manifest_dir / f"{pod.name}.json"
        # Written under a hidden name (the kubelet skips those) and renamed: never read half-written.
        staging = self.manifest_dir / f".{pod.name}.json"
        staging.write_text(json.dumps(pod.manifest(), indent=2) + "\n")
        staging.rename(path)
        return path

    def remove_static_pod(self, name: str) -> None:
        (self.manifest_dir / f"{name}.json").unlink(missing_ok=True)

    def static_pod_name(self, pod: StaticPod) -> str:
        """The name the kubelet gives a static pod (and its sandbox): ``<name>-<node name>``."""
        return f"{pod.name}-{self.node_name}"

    # --- process -------------------------------------------------------------------------------

    def start(self) -> Kubelet:
        """Write the config, start the kubelet and wait until its healthz answers ok."""
        if self.pid is not None and self.is_alive():
            return self
        self.port = free_port(self.registration.node_ip if self.registration else "127.0.0.1")
        self.healthz_port = free_port()
        self.write_config()
        env = dict(os.environ)
        if self.mount_namespace is None:
            env["PINCTL_KUBELET_BINDS"] = self._namespace_binds()
        self.started_at = time.time()
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                ctd.dying_with_parent(self.argv()),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self.pid = self._proc.pid
        _RUNNING[self.pid] = self
        self._wait_healthy()
        return self

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The kubelet stopped (SIGSTOP) for the block, continued (SIGCONT) after it."""
        assert self._proc is not None and self.pid is not None, "the kubelet is not running"
        os.kill(self.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL. Containers keep running: the kubelet leaves them to the runtime."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        _RUNNING.pop(proc.pid, None)
        self.pid = None
        ctd.terminate(proc, STOP_GRACE_S)

    def healthz(self) -> str:
        url = f"http://127.0.0.1:{self.healthz_port}/healthz"
        with _LOOPBACK.open(url, timeout=2) as reply:
            return reply.read().decode(errors="replace")

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = ""
        while time.monotonic() < deadline:
            if not self.is_alive():
                break
            try:
                if self.healthz().strip() == "ok":
                    return
            except (OSError, urllib.error.URLError) as exc:
                last = str(exc)
            time.sleep(0.2)
        state = "exited" if not self.is_alive() else f"not healthy ({last})"
        self.stop()
        raise KubeletError(f"kubelet {state}\n--- log tail ---\n{self.log_tail()}")

    # --- the log ------------------------------------------------------------------------------

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:]) or "(no log)"

    def wait_for_log(self, pattern: str, timeout: float = 30.0, *, since: int = 0) -> re.Match[str]:
        """The first match of ``pattern`` in the log after character ``since``, waiting for it."""
        compiled = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            found = compiled.search(self.log_text(), since)
            if found:
                return found
            if not self.is_alive():
                raise KubeletError(f"kubelet exited before logging {pattern!r}\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise KubeletError(f"no {pattern!r} in the kubelet's log after {timeout}s\n{self.log_tail()}")
            time.sleep(LOG_POLL_S)

    def removals(self, since: int = 0) -> list[Removal]:
        """Every image deletion the log records after character ``since``, in order."""
        text = self.log_text()
        found = []
        for match in REMOVAL.finditer(text, since):
            line_start = text.rfind("\n", 0, match.start()) + 1
            stamp = KLOG_TIME.match(text, line_start)
            found.append(Removal(match["id"], int(match["size"]), stamp.group(0)[6:] if stamp else ""))
        return found

    def line_time(self, match: re.Match[str]) -> datetime.datetime:
        """When the kubelet logged the line holding ``match``, in UTC.

        klog writes local time without year or zone; the kubelet shares this process's zone.
        """
        text = match.string
        stamp = KLOG_TIME.match(text, text.rfind("\n", 0, match.start()) + 1)
        if stamp is None:
            raise KubeletError(f"no klog time on the line of {match.group(0)!r}")
        month, day, hour, minute, second, micro = (int(part) for part in stamp.groups())
        local = datetime.datetime(datetime.date.today().year, month, day, hour, minute, second, micro)
        return local.astimezone(datetime.timezone.utc)

    def last_used(self, image_id: str, before: int) -> Optional[datetime.datetime]:
        """The kubelet's lastUsed for ``image_id`` as of log position ``before`` (level 5), None if never set."""
        pattern = re.compile(r'"Setting Image ID lastUsed" imageID="%s" lastUsed="([^"]+?)(?: m=[^"]*)?"' % re.escape(image_id))
        found = [match.group(1) for match in pattern.finditer(self.log_text(), 0, before)]
        return _go_time(found[-1]) if found else None

    def wait_for_removals(self, count: int, timeout: float = 60.0, *, since: int = 0) -> list[Removal]:
        """At least ``count`` deletions after ``since``, then a short settle so a run's tail is in."""
        deadline = time.monotonic() + timeout
        while len(self.removals(since)) < count:
            if time.monotonic() > deadline or not self.is_alive():
                raise KubeletError(
                    f"{len(self.removals(since))} of {count} image removals after {timeout}s\n{self.log_tail()}"
                )
            time.sleep(LOG_POLL_S)
        return self.removals(since)


def _go_time(text: str) -> datetime.datetime:
    """Go's ``time.Time.String()`` ("2026-12-01 11:19:49.927247945 +0000 UTC"), in UTC, to microseconds."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.(\d+))? ([+-]\d{4}) \S+", text.strip())
    if match is None:
        raise KubeletError(f"not a Go time: {text!r}")
    fraction = (match.group(2) or "0")[:6].ljust(6, "0")
    moment = datetime.datetime.strptime(f"{match.group(1)}.{fraction} {match.group(3)}", "%Y-%m-%d %H:%M:%S.%f %z")
    return moment.astimezone(datetime.timezone.utc)


# --- the node: containerd 1.7 on a small loop-mounted ext4 -------------------------------------


class LoopFs(pods.DedicatedFs):
    """An ext4 of ``size_bytes`` on a loop device at ``path``: what the kubelet reads as its imagefs.

    Not a tmpfs as in ``pods.py``: the kubelet's cadvisor finds a directory's filesystem by
    device number, and every tmpfs mount is a partition of its own to it, so once the native
    snapshotter bind-mounts a container's rootfs (same device number, also tmpfs) it may pick
    that mount and fail ("cannot find filesystem info for device .../rootfs"): then the
    eviction manager gets no stats at all. Bind mounts of a block device share its source and
    are skipped. ``-m 0`` reserves no blocks for root and ``^has_journal`` keeps metadata small,
    so statfs's figures stay close to the size asked for. The backing file lives in /dev/shm
    when it can (no disk writes) and is removed on close, with the loop device (autoclear).
    """

    def __init__(self, path: pathlib.Path, size_bytes: int) -> None:
        super().__init__(path, size_bytes)
        shm = pathlib.Path("/dev/shm")
        backing_dir = shm if shm.is_dir() and os.access(shm, os.W_OK) else self.path.parent
        self.image = backing_dir / f"pinctl-imagefs-{os.getpid()}-{id(self):x}.ext4"

    def open(self) -> LoopFs:
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.image, "wb") as handle:
            handle.truncate(self.size_bytes)
        steps = (
            ["mkfs.ext4", "-F", "-q", "-m", "0", "-O", "^has_journal", "-E", "lazy_itable_init=0", str(self.image)],
            ["mount", "-o", "loop", str(self.image), str(self.path)],
        )
        for argv in steps:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
            if proc.returncode != 0:
                self.image.unlink(missing_ok=True)
                raise runnable.PodsUnavailable(f"{' '.join(argv[:2])} failed: {proc.stderr.strip()}")
        self.mounted = True
        atexit.register(self.close)
        return self

    def close(self) -> None:
        super().close()
        self.image.unlink(missing_ok=True)


@contextlib.contextmanager
def node_daemon(
    base_dir: pathlib.Path, fs_bytes: int, engine: str = "containerd-1.7",
    daemon_class: type[pods.PodsDaemon] = pods.PodsDaemon,
) -> Iterator[tuple[pods.PodsDaemon, LoopFs]]:
    """A pod-capable containerd (of ``daemon_class``) whose root and state are on a fresh :class:`LoopFs`."""
    pods.runc_binary()
    runnable.busybox_path()
    fs = LoopFs(base_dir / "imagefs", fs_bytes).open()
    daemon: Optional[pods.PodsDaemon] = None
    try:
        daemon = daemon_class(engine, base_dir / "daemon", data_dir=fs.path)
        daemon.start()
        runnable.ensure_runnable_sandbox_image(daemon)
        yield daemon, fs
    finally:
        if daemon is not None:
            if daemon.is_alive():
                with contextlib.suppress(cri.CriError):
                    pods.Pods(daemon).cleanup()
            daemon.stop()
            daemon.kill_leftovers()
        fs.close()

"""Real pods through containerd 1.7's CRI: a daemon that can run them, the calls, and runnable images.

What makes pods run here (root without CAP_SYS_RESOURCE, no CNI, no registry):

* runc from Debian (``/usr/sbin/runc``) with a private ``--root``, so teardown can find and kill
  exactly this daemon's containers, and containerd's own bin directory first on PATH so it
  starts the ``containerd-shim-runc-v2`` of the same version;
* host network (``NamespaceMode NODE`` in the sandbox's and containers' namespace options, no
  hostname), so no CNI plugin is ever run;
* ``restrict_oom_score_adj = true``, because the shim may not lower an OOM score here;
* the sandbox (pause) image imported locally before the first pod (``images.ensure_sandbox_image``);
* ``stats_collect_period = 1``, so ``ImageFsInfo`` follows changes within a second;
* the daemon's root and state on a small dedicated tmpfs (:class:`DedicatedFs`), so the image
  filesystem's capacity and free space, as the kubelet reads them with statfs, are real.

Images built by ``tests/harness/images.py`` hold no binaries; :func:`runnable_recipe` images
carry Debian's static busybox in one layer shared by all of them (so ``sleep``/``true`` run)
plus a payload layer of a chosen, incompressible size stored uncompressed, so each image's
size is known to the byte.

The CRI calls encode and decode by field number (``tests/harness/protowire.py``), independent of
pinctl's .proto files, with the message and field names written next to each number.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import hashlib
import io
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from typing import Literal, Optional

from tests.harness import containerd as ctd
from tests.harness import cri, images
from tests.harness.containerd import ContainerdDaemon
from tests.harness.protowire import Message, Reader, Value, encode

RUNTIME = "/runtime.v1.RuntimeService/"
IMAGE = "/runtime.v1.ImageService/"
BUSYBOX_PATHS = (pathlib.Path("/bin/busybox"), pathlib.Path("/usr/bin/busybox"))
RUNC_PATHS = (pathlib.Path("/usr/sbin/runc"), pathlib.Path("/usr/bin/runc"))
# NamespaceMode: POD = 0, CONTAINER = 1, NODE = 2, TARGET = 3.
NAMESPACE_NODE = 2
# ContainerState: CONTAINER_CREATED = 0, CONTAINER_RUNNING = 1, CONTAINER_EXITED = 2, CONTAINER_UNKNOWN = 3.
ContainerState = Literal["created", "running", "exited", "unknown"]
CONTAINER_STATES: dict[int, ContainerState] = {0: "created", 1: "running", 2: "exited", 3: "unknown"}
WantedState = Literal["created", "running", "exited"]
STATE_TIMEOUT_S = 30.0
DEFAULT_FS_BYTES = 256 * 1024 * 1024
CRI_TABLE = '[plugins."io.containerd.grpc.v1.cri"]'
FIXED_MTIME = 0
PT_INTERP = 3


class PodsUnavailable(RuntimeError):
    """Something this host lacks for running pods (runc, busybox, mount privileges)."""


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


# --- runnable images ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunnableRecipe:
    """An image a container can run: busybox plus ``payload_bytes`` of incompressible data."""

    refs: tuple[str, ...]
    seed: str
    payload_bytes: int = 4096
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    entrypoint: tuple[str, ...] = ("/bin/busybox", "sleep", "3600")


def runnable_recipe(
    *refs: str, seed: str = "", payload_bytes: int = 4096, labels: Optional[dict[str, str]] = None
) -> RunnableRecipe:
    """Shorthand like ``images.recipe``: refs are normalized, the seed defaults to the first ref."""
    normalized = tuple(images.normalize_ref(ref) for ref in refs)
    return RunnableRecipe(normalized, seed or normalized[0], payload_bytes, dict(labels or {}))


@dataclasses.dataclass(frozen=True)
class _Blob:
    media_type: str
    data: bytes

    @functools.cached_property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self, **extra: object) -> dict[str, object]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data), **extra}

    @property
    def path(self) -> str:
        return "blobs/sha256/" + self.digest.split(":", 1)[1]


def _tar(entries: list[tarfile.TarInfo], contents: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for entry in entries:
            entry.mtime = FIXED_MTIME
            data = contents.get(entry.name)
            tar.addfile(entry, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _entry(name: str, kind: bytes, mode: int, size: int = 0, link: str = "") -> tarfile.TarInfo:
    entry = tarfile.TarInfo(name)
    entry.type, entry.mode, entry.size, entry.linkname = kind, mode, size, link
    return entry


def busybox_path() -> pathlib.Path:
    for path in BUSYBOX_PATHS:
        if path.is_file() and _is_static_elf(path.read_bytes()):
            return path
    raise PodsUnavailable(
        "no static busybox: install Debian's busybox-static package (scripts/test-packages.txt lists it)"
    )


def _is_static_elf(data: bytes) -> bool:
    """A 64-bit little-endian ELF without a PT_INTERP program header needs no dynamic loader."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return False
    def number(start: int, width: int) -> int:
        return int.from_bytes(data[start : start + width], "little")

    phoff, phentsize, phnum = number(32, 8), number(54, 2), number(56, 2)
    types = (number(phoff + i * phentsize, 4) for i in range(phnum))
    return PT_INTERP not in types


@functools.lru_cache(maxsize=1)
def busybox_layer() -> bytes:
    """One uncompressed layer: /bin/busybox and the applets the harness runs, as symlinks."""
    binary = busybox_path().read_bytes()
    entries = [_entry("bin", tarfile.DIRTYPE, 0o755), _entry("bin/busybox", tarfile.REGTYPE, 0o755, len(binary))]
    entries += [_entry(f"bin/{name}", tarfile.SYMTYPE, 0o777, link="busybox") for name in ("sh", "sleep", "true")]
    entries += [_entry(name, tarfile.DIRTYPE, 0o755) for name in ("etc", "tmp", "proc", "sys", "dev")]
    return _tar(entries, {"bin/busybox": binary})


def _payload_layer(seed: str, size: int) -> bytes:
    data = random.Random(hashlib.sha256(seed.encode()).digest()).randbytes(size)
    return _tar([_entry("payload.bin", tarfile.REGTYPE, 0o644, size)], {"payload.bin": data})


def _build_runnable(recipe: RunnableRecipe) -> tuple[images.ImageInfo, list[_Blob], _Blob]:
    payload = _payload_layer(recipe.seed, recipe.payload_bytes)
    layers = [_Blob(images.OCI_LAYER, busybox_layer()), _Blob(images.OCI_LAYER, payload)]
    platform = images.host_platform().split("/")
    config_doc = {
        "os": platform[0],
        "architecture": platform[1],
        "created": images.CREATED,
        "config": {"Entrypoint": list(recipe.entrypoint), "Labels": recipe.labels},
        "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer in layers]},
    }
    config = _Blob(images.OCI_CONFIG, _canonical(config_doc))
    manifest_doc = {
        "schemaVersion": 2,
        "mediaType": images.OCI_MANIFEST,
        "config": config.descriptor(),
        "layers": [layer.descriptor() for layer in layers],
    }
    manifest = _Blob(images.OCI_MANIFEST, _canonical(manifest_doc))
    blobs = [manifest, config, *layers]
    info = images.ImageInfo(
        refs=recipe.refs,
        digest=manifest.digest,
        media_type=images.OCI_MANIFEST,
        config_digest=config.digest,
        size=sum(len(blob.data) for blob in blobs),
        platforms=(images.host_platform(),),
        manifest_digests=(manifest.digest,),
        labels=dict(recipe.labels),
    )
    return info, blobs, manifest


def _canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def build_runnable_archive(path: pathlib.Path, recipes: list[RunnableRecipe]) -> list[images.ImageInfo]:
    """An OCI layout tarball holding every recipe's image, one index entry per ref."""
    built = [_build_runnable(recipe) for recipe in recipes]
    index_entries = [
        manifest.descriptor(annotations={images.ANNOTATION_IMAGE_NAME: ref})
        for info, _, manifest in built
        for ref in info.refs
    ]
    index = {"schemaVersion": 2, "mediaType": images.OCI_INDEX, "manifests": index_entries}
    written: set[str] = set()
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for blob in (blob for _, blobs, _ in built for blob in blobs):
            if blob.digest not in written:
                written.add(blob.digest)
                _add_file(tar, blob.path, blob.data)
        _add_file(tar, "oci-layout", _canonical({"imageLayoutVersion": "1.0.0"}))
        _add_file(tar, "index.json", _canonical(index))
    return [info for info, _, _ in built]


def _add_file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    member = tarfile.TarInfo(name)
    member.size, member.mode = len(data), 0o644
    tar.addfile(member, io.BytesIO(data))


def load_runnable(
    daemon: ContainerdDaemon, work_dir: pathlib.Path, recipes: list[RunnableRecipe]
) -> list[images.ImageInfo]:
    """Build, import unpacked into ``k8s.io`` (containers start without unpacking), wait for the CRI."""
    work_dir.mkdir(parents=True, exist_ok=True)
    tar_path = work_dir / f"runnable-{uuid.uuid4().hex[:8]}.tar"
    infos = build_runnable_archive(tar_path, recipes)
    try:
        images.import_images(daemon, tar_path, cri.NAMESPACE, unpack=True, wait=False)
    finally:
        tar_path.unlink()
    images.wait_for_cri(daemon, infos)
    return infos


SANDBOX_SEED = "pinctl-runnable-sandbox-image"


def ensure_runnable_sandbox_image(daemon: PodsDaemon) -> images.ImageInfo:
    """Import the configured sandbox (pause) image, built to run: every pod starts it first.

    ``images.ensure_sandbox_image`` builds one without a binary, which the CRI refuses to run
    ("invalid empty entrypoint and cmd"); this one sleeps, which is all a pause process does.
    """
    recipe = RunnableRecipe((daemon.sandbox_image,), SANDBOX_SEED, 64, {}, ("/bin/busybox", "sleep", "86400"))
    (info,) = load_runnable(daemon, daemon.base_dir / "sandbox-image", [recipe])
    return info


# --- CRI calls ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CriContainer:
    """``runtime.v1.Container`` from ``ListContainers``."""

    id: str  # 1
    pod_sandbox_id: str  # 2
    name: str  # 3: ContainerMetadata.name (1)
    image: str  # 4: ImageSpec.image (1), what the container was created with
    image_ref: str  # 5
    state: ContainerState  # 6
    created_at: int  # 7, nanoseconds
    image_id: str  # 10 (CRI 1.30+; empty from runtimes that predate it)


@dataclasses.dataclass(frozen=True)
class CriContainerStatus:
    """The times and image fields of ``runtime.v1.ContainerStatus`` (``ContainerStatus``)."""

    id: str  # 1
    state: ContainerState  # 3
    created_at: int  # 4, nanoseconds
    started_at: int  # 5, nanoseconds, 0 = never started
    finished_at: int  # 6, nanoseconds, 0 = not finished
    exit_code: int  # 7
    image: str  # 8: ImageSpec.image
    image_ref: str  # 9
    image_id: str  # 17


@dataclasses.dataclass(frozen=True)
class CriSandbox:
    """``runtime.v1.PodSandbox`` from ``ListPodSandbox``."""

    id: str  # 1
    name: str  # 2: PodSandboxMetadata.name (1)
    ready: bool  # 3: SANDBOX_READY = 0


@dataclasses.dataclass(frozen=True)
class CriFsUsage:
    """``runtime.v1.FilesystemUsage`` from ``ImageFsInfo``."""

    timestamp: int  # 1, nanoseconds
    mountpoint: str  # 2: FilesystemIdentifier.mountpoint (1)
    used_bytes: int  # 3: UInt64Value.value (1)
    inodes_used: int  # 4: UInt64Value.value (1)


def _call(address: str, method: str, request: Message) -> Reader:
    return Reader(cri.unary_call(address, method, encode(request)))


def sandbox_config(name: str, log_dir: pathlib.Path) -> Message:
    """``PodSandboxConfig`` for a host-network pod (no hostname: the CRI allows none with NODE)."""
    metadata: Message = [(1, name), (2, uuid.uuid5(uuid.NAMESPACE_URL, name).hex), (3, "pinctl-test"), (4, 0)]
    namespaces: Message = [(1, NAMESPACE_NODE)]
    linux: Message = [(2, [(1, namespaces)])]  # LinuxPodSandboxConfig.security_context.namespace_options
    return [(1, metadata), (3, str(log_dir)), (8, linux)]


def run_pod_sandbox(address: str, config: Message) -> str:
    """``RunPodSandbox``: RunPodSandboxRequest.config (1); returns pod_sandbox_id (1)."""
    return _call(address, RUNTIME + "RunPodSandbox", [(1, config)]).text(1)


def create_container(
    address: str, pod_id: str, pod_config: Message, name: str, image: str, command: list[str]
) -> str:
    """``CreateContainer``: pod_sandbox_id (1), ContainerConfig (2), sandbox_config (3)."""
    config: list[tuple[int, Value]] = [(1, [(1, name), (2, 0)]), (2, [(1, image)])]
    config += [(3, part) for part in command]
    config += [(11, f"{name}.log"), (15, [(2, [(3, [(1, NAMESPACE_NODE)])])])]
    request: Message = [(1, pod_id), (2, config), (3, pod_config)]
    return _call(address, RUNTIME + "CreateContainer", request).text(1)


def start_container(address: str, container_id: str) -> None:
    _call(address, RUNTIME + "StartContainer", [(1, container_id)])


def stop_container(address: str, container_id: str, timeout_s: int = 0) -> None:
    _call(address, RUNTIME + "StopContainer", [(1, container_id), (2, timeout_s)])


def remove_container(address: str, container_id: str) -> None:
    _call(address, RUNTIME + "RemoveContainer", [(1, container_id)])


def stop_pod_sandbox(address: str, pod_id: str) -> None:
    _call(address, RUNTIME + "StopPodSandbox", [(1, pod_id)])


def remove_pod_sandbox(address: str, pod_id: str) -> None:
    _call(address, RUNTIME + "RemovePodSandbox", [(1, pod_id)])


def list_containers(address: str) -> list[CriContainer]:
    """``ListContainers`` with no filter: every container, any state (as the kubelet's GC asks)."""
    reply = _call(address, RUNTIME + "ListContainers", [])
    return [_container(item) for item in reply.messages(1)]


def _container(item: Reader) -> CriContainer:
    return CriContainer(
        id=item.text(1),
        pod_sandbox_id=item.text(2),
        name=item.message(3).text(1),
        image=item.message(4).text(1),
        image_ref=item.text(5),
        state=_state(item.integer(6)),
        created_at=item.integer(7),
        image_id=item.text(10),
    )


def _state(value: int) -> ContainerState:
    return CONTAINER_STATES.get(value, "unknown")


def container_status(address: str, container_id: str) -> CriContainerStatus:
    status = _call(address, RUNTIME + "ContainerStatus", [(1, container_id)]).message(1)
    return CriContainerStatus(
        id=status.text(1),
        state=_state(status.integer(3)),
        created_at=status.integer(4),
        started_at=status.integer(5),
        finished_at=status.integer(6),
        exit_code=status.integer(7),
        image=status.message(8).text(1),
        image_ref=status.text(9),
        image_id=status.text(17),
    )


def list_pod_sandboxes(address: str) -> list[CriSandbox]:
    reply = _call(address, RUNTIME + "ListPodSandbox", [])
    return [CriSandbox(item.text(1), item.message(2).text(1), item.integer(3) == 0) for item in reply.messages(1)]


def image_fs_info(address: str) -> list[CriFsUsage]:
    """``ImageFsInfo``: image_filesystems (1), each a FilesystemUsage."""
    reply = _call(address, IMAGE + "ImageFsInfo", [])
    return [
        CriFsUsage(
            timestamp=fs.integer(1),
            mountpoint=fs.message(2).text(1),
            used_bytes=fs.message(3).integer(1),
            inodes_used=fs.message(4).integer(1),
        )
        for fs in reply.messages(1)
    ]


def fresh_image_fs_info(address: str, timeout: float = STATE_TIMEOUT_S) -> CriFsUsage:
    """The first image filesystem's usage from a stats sync that began after this call.

    containerd refreshes snapshot usage every ``stats_collect_period`` (1 s here) and answers
    ``ImageFsInfo`` from that cache, with the cache's timestamp.
    """
    asked_at = time.time_ns()
    deadline = time.monotonic() + timeout
    while True:
        usage = image_fs_info(address)[0]
        if usage.timestamp >= asked_at:
            return usage
        if time.monotonic() > deadline:
            raise cri.CriError(f"ImageFsInfo not refreshed in {timeout}s (last at {usage.timestamp})")
        time.sleep(0.1)


def settled_image_fs_info(address: str, timeout: float = STATE_TIMEOUT_S) -> CriFsUsage:
    """Fresh usage once two consecutive syncs agree (deleted snapshots are removed in the background)."""
    deadline = time.monotonic() + timeout
    previous = fresh_image_fs_info(address, timeout)
    while True:
        current = fresh_image_fs_info(address, timeout)
        if (current.used_bytes, current.inodes_used) == (previous.used_bytes, previous.inodes_used):
            return current
        if time.monotonic() > deadline:
            raise cri.CriError(f"ImageFsInfo still changing after {timeout}s")
        previous = current


def remove_image(address: str, image: str) -> None:
    """``RemoveImage``: RemoveImageRequest.image (1) is an ImageSpec whose image (1) is a ref or id."""
    _call(address, IMAGE + "RemoveImage", [(1, [(1, image)])])


def image_status(address: str, image: str) -> Optional[cri.CriImage]:
    """``ImageStatus``: None when the CRI says the image is absent (an empty ``image`` field)."""
    reply = _call(address, IMAGE + "ImageStatus", [(1, [(1, image)])])
    if not reply.all_bytes(1):
        return None
    found = reply.message(1)
    return cri.CriImage(
        id=found.text(1),
        repo_tags=tuple(found.texts(2)),
        repo_digests=tuple(found.texts(3)),
        size=found.integer(4),
        pinned=bool(found.integer(8)),
    )


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

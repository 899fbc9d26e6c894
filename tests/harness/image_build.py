"""pinctl's container image, built from the repository's Containerfile without a Docker daemon.

Two steps, each cached in the engine cache (``~/.cache/pinctl/engines``, ``$PINCTL_ENGINE_CACHE``)
with a ``stamp.json`` saying what it was made from and how long that took:

* ``pinctl-base``: a Debian bookworm root made with ``debootstrap --variant=minbase`` from this
  machine's mirror, with python3 and python3-venv (what the Containerfile asks of its base), its
  apt lists, docs and locales trimmed, committed as an image with ``buildah``. Keyed on the
  suite, the packages, the mirror and debootstrap's version.
* ``pinctl-image``: ``buildah bud -f Containerfile --build-arg BASE_IMAGE=<that base>`` on the
  repository, pushed to an OCI layout and packed as a tar that ``ctr images import`` reads, its
  index naming the image as the DaemonSet does. Keyed on the base, the Containerfile, the
  .dockerignore and every file ``pip install .`` reads. pip fetches pinctl's wheels from PyPI
  inside the build, through this machine's own pip configuration and CA bundle (mounted for the
  RUN steps only, as an operator behind a TLS-inspecting proxy would; never in the image).

buildah runs with a private storage (vfs, below the cache), chroot isolation, a signature policy
and a registries.conf of its own with no search registries, and ``--pull=never``: it reads no
host container configuration and asks no registry for anything. A build holds
``<cache>/.pinctl-image.lock`` (``flock``), so test runs side by side build once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import glob
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from tests.harness import cri, debs, images

if TYPE_CHECKING:
    from tests.harness.containerd import ContainerdDaemon

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "Containerfile"
IGNORE_FILE = ROOT / ".dockerignore"
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv")
# Bump when the steps change in a way the other inputs do not show.
BASE_RECIPE = 1
IMAGE_RECIPE = 1
# Left out of the base: nothing in the image reads them (apt is never run in it).
TRIMMED = ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info",
           "usr/share/locale")
# The machine's pip settings and CA bundle, when it has them, for the build's RUN steps.
HOST_PIP_FILES = ("/etc/pip.conf", "/etc/ssl/certs/ca-certificates.crt")
BUILD_TIMEOUT_S = 1200.0
# How long an archive of another key is kept after its last use (pinctl_image).
ARCHIVE_KEEP_S = 3 * 3600.0
DEBOOTSTRAP_TIMEOUT_S = 1200.0


class ImageUnavailable(debs.EngineUnavailable):
    """The image cannot be built here (no buildah or debootstrap, no mirror, no PyPI)."""


@dataclasses.dataclass(frozen=True)
class BuiltImage:
    """An image archive for ``ctr images import``, and what making it took."""

    archive: pathlib.Path
    name: str  # as containerd will hold it (normalized), e.g. the DaemonSet's image
    key: str
    seconds: dict[str, float]  # "base" and "image": build times recorded when each was made
    cached: bool  # nothing was built by this call


# -- what the build reads -----------------------------------------------------------------------


def ignore_matcher(text: str) -> Callable[[str], bool]:
    """Whether the build context leaves a path out, as Docker reads .dockerignore: the last
    matching pattern decides, "!" takes a path back in, a matched directory leaves out
    everything below it, "**" spans directories."""
    rules: list[tuple[re.Pattern[str], bool]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        regex = ""
        for part in re.split(r"(\*\*/?|\*|\?|\[[^\]]*\])", pattern):
            if part.startswith("**"):
                regex += "(?:.*/)?" if part.endswith("/") else ".*"
            elif part == "*":
                regex += "[^/]*"
            elif part == "?":
                regex += "[^/]"
            elif part.startswith("["):
                regex += part
            else:
                regex += re.escape(part)
        rules.append((re.compile(regex + r"\Z"), keep))

    def excluded(path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        result = False
        for regex, keep in rules:
            if any(regex.match(prefix) for prefix in prefixes):
                result = not keep
        return result

    return excluded


def build_inputs(root: pathlib.Path = ROOT) -> list[str]:
    """Files `pip install .` reads: pyproject.toml, the readme, the package, the data files."""
    toml = _toml()
    project = toml.loads((root / "pyproject.toml").read_text())
    setuptools = project.get("tool", {}).get("setuptools", {})
    wanted = ["pyproject.toml", project["project"].get("readme", "README.md")]
    where = setuptools.get("packages", {}).get("find", {}).get("where", ["."])
    for folder in where:
        wanted += [str(p.relative_to(root)) for p in (root / folder).rglob("*.py") if "__pycache__" not in p.parts]
    for package, patterns in setuptools.get("package-data", {}).items():
        for folder in where:
            for pattern in patterns:
                found = glob.glob(str(root / folder / package.replace(".", "/") / pattern))
                wanted += [str(pathlib.Path(p).relative_to(root)) for p in found]
    for patterns in setuptools.get("data-files", {}).values():
        for pattern in patterns:
            found = glob.glob(str(root / pattern))
            assert found, f"pyproject.toml data file {pattern} matches nothing"
            wanted += [str(pathlib.Path(p).relative_to(root)) for p in found]
    return sorted(set(wanted))


def _toml() -> Any:
    from pinctl.config.files import toml_reader

    return toml_reader()


def _digest(parts: list[tuple[str, bytes]]) -> str:
    hashed = hashlib.sha256()
    for name, data in parts:
        hashed.update(f"{name}\0{len(data)}\0".encode())
        hashed.update(data)
    return hashed.hexdigest()


def base_key() -> str:
    """What the base is made from: the suite, its packages, the mirror, debootstrap's version."""
    spec = {"suite": SUITE, "packages": list(BASE_PACKAGES), "mirror": debs.mirror_uri(),
            "debootstrap": _tool_version("debootstrap"), "trimmed": list(TRIMMED), "recipe": BASE_RECIPE}
    return _digest([("base", json.dumps(spec, sort_keys=True).encode())])


def image_key(base: str) -> str:
    """What the image is made from: the base, the Containerfile, .dockerignore, pip's inputs."""
    files = ["Containerfile", ".dockerignore", *build_inputs()]
    return _digest([("base", base.encode()), ("recipe", str(IMAGE_RECIPE).encode())]
                   + [(name, (ROOT / name).read_bytes()) for name in files])


# -- buildah with a configuration of its own ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Buildah:
    """buildah on a private storage below the cache, reading no host container configuration."""

    home: pathlib.Path

    def prepare(self) -> Buildah:
        for sub in ("storage", "run", "tmp"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        (self.home / "policy.json").write_text(json.dumps({"default": [{"type": "insecureAcceptAnything"}]}))
        # No search registries and enforcing short names: a name not in this storage is an error.
        (self.home / "registries.conf").write_text('unqualified-search-registries = []\nshort-name-mode = "enforcing"\n')
        (self.home / "storage.conf").write_text('[storage]\ndriver = "vfs"\n')
        # Its network backend's config (and lock file) in this directory, not /etc/cni/net.d: a
        # test set-up leaves nothing on the host (the build's RUN steps need no network of their own).
        (self.home / "cni").mkdir(exist_ok=True)
        (self.home / "containers.conf").write_text(f'[network]\nnetwork_config_dir = "{self.home / "cni"}"\n')
        return self

    def env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith(("BUILDAH_", "CONTAINERS_"))}
        env.update({"CONTAINERS_REGISTRIES_CONF": str(self.home / "registries.conf"),
                    "CONTAINERS_STORAGE_CONF": str(self.home / "storage.conf"),
                    "CONTAINERS_CONF": str(self.home / "containers.conf"),
                    "BUILDAH_ISOLATION": "chroot", "TMPDIR": str(self.home / "tmp")})
        return env

    def __call__(self, *args: str, timeout: float = 600.0, cwd: pathlib.Path | None = None) -> str:
        binary = shutil.which("buildah")
        if binary is None:
            raise ImageUnavailable("buildah is not installed (scripts/test-packages.txt lists it)")
        argv = [binary, "--root", str(self.home / "storage"), "--runroot", str(self.home / "run"),
                "--storage-driver", "vfs", *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=self.env(), cwd=cwd,
                              check=False)
        if proc.returncode != 0:
            raise ImageUnavailable(f"buildah {' '.join(args[:2])} failed ({proc.returncode}): "
                                   f"{proc.stderr.strip()[-2000:]}")
        return proc.stdout.strip()

    def has(self, name: str) -> bool:
        try:
            self("inspect", "--type", "image", name)
        except ImageUnavailable:
            return False
        return True

    @property
    def policy(self) -> str:
        return str(self.home / "policy.json")


# -- the two steps -------------------------------------------------------------------------------


def _stamp(directory: pathlib.Path) -> dict[str, object]:
    try:
        found = json.loads((directory / "stamp.json").read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _seconds(stamp: dict[str, object]) -> float:
    value = stamp.get("seconds", 0.0)
    return float(value) if isinstance(value, (int, float)) else 0.0


def _write_stamp(directory: pathlib.Path, stamp: dict[str, object]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "stamp.json").write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")


def ensure_base(buildah: Buildah, cache: pathlib.Path) -> tuple[str, str, float, bool]:
    """(image name, key, build seconds, whether it was cached): the Debian base in buildah's storage."""
    key = base_key()
    name = f"pinctl-test-base:{key[:16]}"
    directory = cache / "pinctl-base"
    stamp = _stamp(directory)
    if stamp.get("key") == key and buildah.has(name):
        return name, key, _seconds(stamp), True
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rootfs.", dir=buildah.home / "tmp") as work:
        rootfs = pathlib.Path(work) / "rootfs"
        _debootstrap(rootfs)
        container = buildah("from", "--signature-policy", buildah.policy, "scratch")
        try:
            mounted = pathlib.Path(buildah("mount", container))
            # tar keeps owners, modes, links and device nodes as debootstrap made them.
            packed = subprocess.run(f"tar -C {rootfs} -cf - . | tar -C {mounted} -xf -", shell=True,
                                    capture_output=True, text=True, timeout=600, check=False)
            if packed.returncode != 0:
                raise ImageUnavailable(f"copying the base's root failed: {packed.stderr.strip()}")
            buildah("umount", container)
            buildah("config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "--cmd", "/bin/sh", container)
            buildah("commit", "--signature-policy", buildah.policy, container, name)
        finally:
            with contextlib.suppress(ImageUnavailable):
                buildah("rm", container)
    seconds = round(time.monotonic() - started, 1)
    _write_stamp(directory, {"key": key, "name": name, "suite": SUITE, "packages": list(BASE_PACKAGES),
                             "seconds": seconds})
    return name, key, seconds, False


def _debootstrap(rootfs: pathlib.Path) -> None:
    binary = shutil.which("debootstrap")
    if binary is None:
        raise ImageUnavailable("debootstrap is not installed (scripts/test-packages.txt lists it)")
    proc = subprocess.run(
        [binary, "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(rootfs), debs.mirror_uri()],
        capture_output=True, text=True, timeout=DEBOOTSTRAP_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        raise ImageUnavailable(f"debootstrap {SUITE} failed ({proc.returncode}): {proc.stdout.strip()[-1500:]}")
    for part in TRIMMED:
        for child in (rootfs / part).glob("*"):
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()


def pinctl_image(name: str) -> BuiltImage:
    """The image the Containerfile makes, as an archive whose index names it ``name``
    (normalized: the CRI looks a short name up under the default registry)."""
    cache = debs.cache_root()
    full = images.normalize_ref(name)
    with _locked(cache / ".pinctl-image.lock"):
        buildah = Buildah(cache / "buildah").prepare()
        key = image_key(base_key())
        directory = cache / "pinctl-image"
        archive = directory / f"pinctl-{key[:16]}.tar"
        stamp = _stamp(directory)
        if stamp.get("key") == key and stamp.get("name") == full and archive.is_file():
            recorded = {"base": _seconds(_stamp(cache / "pinctl-base")), "image": _seconds(stamp)}
            os.utime(archive)  # in use: kept from another checkout's build (below)
            return BuiltImage(archive, full, key, recorded, True)
        base, _base_key, base_seconds, _base_cached = ensure_base(buildah, cache)
        started = time.monotonic()
        _build(buildah, base, key, full, archive)
        seconds = round(time.monotonic() - started, 1)
        # Another checkout's session on this machine may still import its own archive: one used
        # within ARCHIVE_KEEP_S stays (the suite imports it for the fleet minutes after the build).
        for old in directory.glob("pinctl-*.tar"):
            if old != archive and time.time() - old.stat().st_mtime > ARCHIVE_KEEP_S:
                old.unlink()
        _write_stamp(directory, {"key": key, "name": full, "base": base, "seconds": seconds,
                                 "archive": archive.name})
        return BuiltImage(archive, full, key, {"base": base_seconds, "image": seconds}, False)


def _build(buildah: Buildah, base: str, key: str, full: str, archive: pathlib.Path) -> None:
    tag = f"pinctl-test:{key[:16]}"
    volumes = [arg for path in HOST_PIP_FILES if os.path.isfile(path) for arg in ("--volume", f"{path}:{path}:ro")]
    buildah("bud", "--signature-policy", buildah.policy, "--isolation", "chroot", "--pull=never", "--layers=false",
            "--build-arg", f"BASE_IMAGE={base}", *volumes, "-f", str(CONTAINERFILE), "-t", tag, str(ROOT),
            timeout=BUILD_TIMEOUT_S, cwd=ROOT)
    try:
        with tempfile.TemporaryDirectory(prefix="oci.", dir=buildah.home / "tmp") as work:
            layout = pathlib.Path(work) / "layout"
            buildah("push", "--signature-policy", buildah.policy, tag, f"oci:{layout}:{full}")
            _name_in_index(layout, full)
            archive.parent.mkdir(parents=True, exist_ok=True)
            partial = archive.with_suffix(".partial")
            with tarfile.open(partial, "w") as tar:
                for path in sorted(layout.rglob("*")):
                    tar.add(path, arcname=str(path.relative_to(layout)), recursive=False)
            partial.rename(archive)
    finally:
        with contextlib.suppress(ImageUnavailable):
            buildah("rmi", tag)
        with contextlib.suppress(ImageUnavailable):
            buildah("rmi", "--prune")


def _name_in_index(layout: pathlib.Path, full: str) -> None:
    """containerd's importer names an image by io.containerd.image.name verbatim; an OCI
    ref.name alone ("pinctl:0.1.0") it would need a --base-name for."""
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text())
    for manifest in index["manifests"]:
        manifest.setdefault("annotations", {})[images.ANNOTATION_IMAGE_NAME] = full
    index_path.write_text(json.dumps(index))


@contextlib.contextmanager
def _locked(path: pathlib.Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _tool_version(tool: str) -> str:
    binary = shutil.which(tool)
    if binary is None:
        raise ImageUnavailable(f"{tool} is not installed (scripts/test-packages.txt lists it)")
    proc = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=False)
    return proc.stdout.strip() or proc.stderr.strip()


def import_image(daemon: ContainerdDaemon, built: BuiltImage) -> None:
    """``ctr images import`` into ``k8s.io``, unpacked for the daemon's snapshotter, then waits
    until the CRI lists it."""
    args = ["images", "import", "--snapshotter", "native"]
    if daemon.config_version >= 3:
        args.append("--local")
    daemon.ctr(*args, str(built.archive), timeout=600)
    cri.wait_for_refs(daemon.address, [built.name])

"""A kubelet built from source with the go command, once per machine, cached beside the engines.

``k8s.io/kubernetes`` cannot be ``go install``-ed: its go.mod replaces every staging module
(``k8s.io/api``, ``k8s.io/client-go``, ...) with ``./staging/src/...``, directories that are not in
its module zip (each holds a go.mod of its own), and ``go install`` refuses replace directives
anyway. So the harness writes a small wrapper module into the cache that requires
``k8s.io/kubernetes`` at :data:`KUBERNETES_VERSION` and replaces each of those staging modules
with its published ``v0.<minor>.<patch>`` release, read from that very go.mod (no list is kept
here to go stale), then builds ``k8s.io/kubernetes/cmd/kubelet`` in it. Sources come from the Go
module proxy through the go command's usual configuration; no kubernetes code enters this
repository.

Cached in ``$PINCTL_ENGINE_CACHE`` (else ``~/.cache/pinctl/engines``) under ``kubelet-<version>``,
behind a file lock of its own (a build holds it for many minutes; the Debian engines must not
wait for that), and stamped like ``debs.py``: a stamp that matches the version and the build
recipe means the binary is reused without touching the network.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

from tests.harness import debs, gobuild

# 1.37 is the newest release the module proxy serves; ImageVolume is GA from 1.36, and 1.37
# still runs on cgroup v1 when told to (failCgroupV1: false), which this machine may need.
KUBERNETES_VERSION = "v1.37.2"
GO_PATHS = (pathlib.Path("/usr/local/go/bin/go"), pathlib.Path("/usr/bin/go"))
# Bump when the wrapper module or the build flags change: a stamp from another recipe is stale.
BUILD_RECIPE = 1
WRAPPER_MODULE = "pinctl.test/kubelet-build"
KUBELET_PACKAGE = "k8s.io/kubernetes/cmd/kubelet"
VERSION_PACKAGE = "k8s.io/component-base/version"
# Two shared cores: compiling the kubelet's ~2,000 packages takes tens of minutes.
BUILD_TIMEOUT_S = 3 * 3600
DOWNLOAD_TIMEOUT_S = 1800
_STAGING_REPLACE = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/src/\1\s*$")


class KubeletUnavailable(Exception):
    """No kubelet binary can be had here (no suitable go command, download or build failed)."""


@dataclasses.dataclass(frozen=True)
class KubeletBuild:
    """A built kubelet and what its stamp says about it."""

    binary: pathlib.Path
    version: str  # the kubernetes release, e.g. "v1.37.2"
    reported_version: str  # what ``kubelet --version`` says
    go_version: str
    built_at: str  # ISO 8601, UTC
    download_seconds: float
    build_seconds: float


def kubelet_dir(version: str = KUBERNETES_VERSION) -> pathlib.Path:
    return debs.cache_root() / f"kubelet-{version}"


def ensure_kubelet(version: str = KUBERNETES_VERSION) -> KubeletBuild:
    """The cached kubelet of ``version``, building it first when no matching stamp exists."""
    target = kubelet_dir(version)
    try:
        with _locked(debs.cache_root() / f".kubelet-{version}.lock"):
            build = _from_stamp(target, version)
            if build is None:
                _build(target, version)
                build = _from_stamp(target, version)
            if build is None:
                raise KubeletUnavailable(f"built kubelet {version} but its stamp in {target} does not match")
            return build
    except OSError as exc:
        raise KubeletUnavailable(f"kubelet cache {target}: {exc}") from exc


def go_binary() -> pathlib.Path:
    """``$PINCTL_GO``, else the first go command of :data:`GO_PATHS` (Debian's may be too old)."""
    env = os.environ.get("PINCTL_GO")
    candidates = [pathlib.Path(env)] if env else list(GO_PATHS)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise KubeletUnavailable(f"no go command at {', '.join(map(str, candidates))} (set PINCTL_GO)")


@contextlib.contextmanager
def _locked(lock_path: pathlib.Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _from_stamp(target: pathlib.Path, version: str) -> KubeletBuild | None:
    try:
        stamp = json.loads((target / "stamp.json").read_text())
    except (OSError, ValueError):
        return None
    binary = target / "bin" / "kubelet"
    if not isinstance(stamp, dict) or stamp.get("version") != version or stamp.get("recipe") != BUILD_RECIPE:
        return None
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        return None
    return KubeletBuild(
        binary=binary,
        version=version,
        reported_version=str(stamp.get("reported_version", "")),
        go_version=str(stamp.get("go_version", "")),
        built_at=str(stamp.get("built_at", "")),
        download_seconds=float(stamp.get("download_seconds", 0.0)),
        build_seconds=float(stamp.get("build_seconds", 0.0)),
    )


def _go_env(go: pathlib.Path, work: pathlib.Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            # The go command found first on PATH must be the one that builds (cgo is off, and
            # a go.mod "toolchain" line must never make it download another toolchain).
            "PATH": os.pathsep.join([str(go.parent), env.get("PATH", "/usr/bin:/bin")]),
            "GOTOOLCHAIN": "local",
            "GOWORK": "off",
            "GOFLAGS": "-mod=mod",
            # Kubernetes releases its kubelet statically linked; no C toolchain is needed.
            "CGO_ENABLED": "0",
            "GOTMPDIR": str(work),
            # A build cache of its own, removed with ``work``: the kubelet leaves ~4 GB of objects
            # that nothing else reuses. The module cache stays shared, so a rebuild downloads nothing.
            "GOCACHE": str(work / "gocache"),
        }
    )
    return env


def _say(text: str) -> None:
    print(f"kubelet build: {text}", file=sys.stderr, flush=True)


def _run(argv: list[str], what: str, cwd: pathlib.Path, env: dict[str, str], timeout: float, log: pathlib.Path) -> str:
    try:
        proc = gobuild.run_announced(argv, what, timeout, _say, cwd=cwd, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KubeletUnavailable(f"{what} failed: {exc}") from exc
    with open(log, "a") as handle:
        handle.write(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}(exit {proc.returncode})\n")
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-3000:]
        raise KubeletUnavailable(f"{what} failed (exit {proc.returncode}, log {log}): {tail}")
    return proc.stdout


def staging_replacements(kubernetes_go_mod: str, version: str) -> dict[str, str]:
    """Each module the kubernetes go.mod points into ./staging/src, with its published version."""
    match = re.fullmatch(r"v1\.(\d+)\.(\d+)(-[\w.]+)?", version)
    if not match:
        raise KubeletUnavailable(f"not a kubernetes release version: {version!r}")
    staging_version = f"v0.{match.group(1)}.{match.group(2)}{match.group(3) or ''}"
    found: dict[str, str] = {}
    for line in kubernetes_go_mod.splitlines():
        # Single-line ("replace a => ./b") and block forms alike.
        hit = _STAGING_REPLACE.match(line.removeprefix("replace "))
        if hit:
            found[hit.group(1)] = staging_version
    if not found:
        raise KubeletUnavailable("the kubernetes go.mod replaces no staging modules: has its layout changed?")
    return found


def wrapper_go_mod(version: str, go_directive: str, replacements: dict[str, str]) -> str:
    lines = [
        "// Generated by tests/harness/kubelet_build.py: builds the kubelet from the kubernetes module.",
        f"module {WRAPPER_MODULE}",
        "",
        f"go {go_directive}",
        "",
        f"require k8s.io/kubernetes {version}",
        "",
        "replace (",
        *(f"\t{module} => {module} {pinned}" for module, pinned in sorted(replacements.items())),
        ")",
        "",
    ]
    return "\n".join(lines)


def _ldflags(version: str) -> str:
    # What the kubernetes build stamps into component-base, so `kubelet --version` tells the release.
    major, minor = version.lstrip("v").split(".")[:2]
    built = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    stamps = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": built,
    }
    return " ".join(["-s", "-w", *(f"-X {VERSION_PACKAGE}.{key}={value}" for key, value in stamps.items())])


def _build(target: pathlib.Path, version: str) -> None:
    go = go_binary()
    target.mkdir(parents=True, exist_ok=True)
    build_dir = target / "build"
    shutil.rmtree(build_dir, ignore_errors=True)
    build_dir.mkdir()
    log = target / "build.log"
    log.write_text(f"building kubelet {version} with {go}\n")
    work = pathlib.Path(tempfile.mkdtemp(prefix="gotmp.", dir=target))
    env = _go_env(go, work)
    try:
        go_version = _run([str(go), "env", "GOVERSION"], "go env", build_dir, env, 60, log).strip()
        began = time.monotonic()
        # Only the .mod file: its go directive and its staging replace lines.
        _say(f"go list -m k8s.io/kubernetes@{version} (building kubelet {version}; each step prints a line)")
        listed = json.loads(
            _run([str(go), "list", "-m", "-json", f"k8s.io/kubernetes@{version}"], "go list -m", build_dir, env,
                 DOWNLOAD_TIMEOUT_S, log)
        )
        mod_text = pathlib.Path(listed["GoMod"]).read_text()
        go_directive = str(listed.get("GoVersion") or "1.26.0")
        (build_dir / "go.mod").write_text(wrapper_go_mod(version, go_directive, staging_replacements(mod_text, version)))
        # Resolves and downloads every module the kubelet's packages import, filling go.sum.
        _say(f"go get {KUBELET_PACKAGE}@{version} (downloads its modules: minutes the first time)")
        _run([str(go), "get", f"{KUBELET_PACKAGE}@{version}"], "go get", build_dir, env, DOWNLOAD_TIMEOUT_S, log)
        downloaded = time.monotonic()
        out = target / "bin" / "kubelet.partial"
        out.parent.mkdir(exist_ok=True)
        _say(f"go build {KUBELET_PACKAGE} (about 12 minutes on two cores the first time; log {log})")
        _run([str(go), "build", "-o", str(out), "-ldflags", _ldflags(version), KUBELET_PACKAGE], "go build",
             build_dir, env, BUILD_TIMEOUT_S, log)
        built = time.monotonic()
        reported = _run([str(out), "--version"], "kubelet --version", build_dir, env, 60, log).strip()
        out.rename(target / "bin" / "kubelet")
        _say(f"done in {time.monotonic() - began:.0f} s: {target / 'bin' / 'kubelet'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stamp = {
        "version": version,
        "recipe": BUILD_RECIPE,
        "reported_version": reported,
        "go_version": go_version,
        "go": str(go),
        "built_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "download_seconds": round(downloaded - began, 1),
        "build_seconds": round(built - downloaded, 1),
        "cpus": os.cpu_count(),
    }
    (target / "stamp.json").write_text(json.dumps(stamp, indent=2) + "\n")


def main(argv: list[str]) -> int:
    """``python -m tests.harness.kubelet_build [VERSION]``: build (or find) a cached kubelet, say what it is."""
    try:
        build = ensure_kubelet(*argv[:1])
    except KubeletUnavailable as exc:
        print(f"kubelet_build: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(dataclasses.asdict(build), default=str, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

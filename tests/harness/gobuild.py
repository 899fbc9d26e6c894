"""Go programs built once per machine into the engine cache, from the Go module proxy.

``binary(name)`` returns the path of the binary an entry of ``engines.ENGINES`` names,
building it first when the cache has none made from that module version with this go:

    <cache>/<name>/bin/<binary>
    <cache>/<name>/stamp.json      what it was built from, with which go, and how long it took

A build holds ``<cache>/.<name>.lock`` (``flock``), so concurrent test runs on one machine
build it once. Nothing is installed system-wide and the repository holds no third-party code:
the go command downloads each module into its own module cache and builds from there.

Each step prints one line to stderr (``crio build: go build ./cmd/crio ...``) and a long one
says every minute that it is still running: a build can take minutes on a busy machine, and
pytest shows stderr with ``-s`` and in a failure's report.

Which go: the newest go command found (``/usr/local/go/bin/go``, every ``go`` on PATH,
Debian's ``/usr/lib/go-*``). ``scripts/bootstrap --test`` installs Debian's golang-go for the
relay, which is older than what these modules need, and may come first on PATH.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import os
import pathlib
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from tests.harness import debs, engines
from tests.harness.engines import GoEngine

GO_CANDIDATES = ("/usr/local/go/bin/go", "/usr/lib/go/bin/go", *sorted(glob.glob("/usr/lib/go-*/bin/go")))
DOWNLOAD_TIMEOUT_S = 600.0
# cri-dockerd takes 90 s on two idle cores with a cold build cache; leave room for a busy machine.
BUILD_TIMEOUT_S = 1800.0
VERSION_TIMEOUT_S = 30.0
# How often a running step says it still is.
HEARTBEAT_S = 60.0
MAKE_TIMEOUT_S = 300.0


class GoBuildError(debs.EngineUnavailable):
    """A Go engine could not be downloaded or built here (fails CI like any missing engine)."""


class NotServed(debs.EngineUnavailable):
    """The table says this engine cannot be had here (the registry refuses that version)."""


@dataclasses.dataclass(frozen=True)
class GoToolchain:
    path: pathlib.Path
    version: str  # "go1.26.8"

    @property
    def numbers(self) -> tuple[int, ...]:
        return _version_numbers(self.version)


def _version_numbers(version: str) -> tuple[int, ...]:
    match = re.match(r"go(\d+)(?:\.(\d+))?(?:\.(\d+))?", version)
    return tuple(int(part or 0) for part in match.groups()) if match else ()


@functools.lru_cache(maxsize=1)
def toolchain() -> GoToolchain:
    """The newest go command on this machine."""
    paths = [pathlib.Path(p) for p in GO_CANDIDATES]
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if entry:
            paths.append(pathlib.Path(entry) / "go")
    found: dict[pathlib.Path, GoToolchain] = {}
    for path in paths:
        if not (path.is_file() and os.access(path, os.X_OK)):
            continue
        real = path.resolve()
        if real in found:
            continue
        version = _go_version(path)
        if version:
            found[real] = GoToolchain(path, version)
    if not found:
        raise GoBuildError(f"no go command found (looked at {', '.join(GO_CANDIDATES)} and PATH)")
    return max(found.values(), key=lambda tool: tool.numbers)


def _go_version(path: pathlib.Path) -> str:
    try:
        proc = subprocess.run(
            [str(path), "env", "GOVERSION"], capture_output=True, text=True,
            timeout=VERSION_TIMEOUT_S, env=_go_env(), check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    version = proc.stdout.strip()
    return version if proc.returncode == 0 and _version_numbers(version) else ""


def _go_env(**extra: str) -> dict[str, str]:
    """The go command's environment: the machine's proxy settings, nothing that changes the build."""
    env = {key: value for key, value in os.environ.items() if key not in _DROPPED_ENV}
    env.update(
        # A module asking for a newer Go fails here rather than fetching a toolchain unasked.
        GOTOOLCHAIN="local",
        # A go.work in some parent directory must not join the build.
        GOWORK="off",
        GO111MODULE="on",
        # Static binaries: no C compiler needed, and nothing to break with the host's libc.
        CGO_ENABLED="0",
        # The copy has no VCS metadata to stamp.
        GOFLAGS="-buildvcs=false",
    )
    env.update(extra)
    return env


_DROPPED_ENV = frozenset({"GOFLAGS", "GOOS", "GOARCH", "GOBIN", "GOWORK", "GOTOOLCHAIN", "CGO_ENABLED", "GOEXPERIMENT"})


def spec_of(name: str) -> GoEngine:
    spec = engines.go_engines().get(name)
    if spec is None:
        raise GoBuildError(f"unknown Go engine {name!r}; known: {sorted(engines.go_engines())}")
    if spec.unavailable:
        raise NotServed(f"{name} ({spec.import_path}@{spec.version}) cannot be had here: {spec.unavailable}")
    return spec


def binary(name: str) -> pathlib.Path:
    """The built binary of Go engine ``name``; builds it on first use (locked, stamped)."""
    spec = spec_of(name)
    go = toolchain()
    root = debs.cache_root()
    target = root / name
    wanted = _stamp_of(spec, go)
    try:
        with debs._locked(root / f".{name}.lock"):
            built = target / "bin" / spec.binary
            companions = [target / "bin" / installed for installed in _beside(spec)]
            if _stamp_fits(read_stamp(name), wanted) and all(os.access(p, os.X_OK) for p in (built, *companions)):
                return built
            seconds = _build(spec, go, target)
            stamp = {**wanted, "seconds": seconds, "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            (target / "stamp.json").write_text(json.dumps(stamp, indent=2) + "\n")
            return built
    except OSError as exc:
        raise GoBuildError(f"engine cache {root}: {exc}") from exc


def read_stamp(name: str) -> dict[str, object]:
    """What ``<cache>/<name>`` was built from, and its timings (``{}`` when not built)."""
    try:
        data = json.loads((debs.cache_root() / name / "stamp.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def build_seconds(name: str) -> dict[str, float]:
    """``{"download": s, "build": s}`` of the build the cache holds for ``name``."""
    seconds = read_stamp(name).get("seconds")
    return {str(k): float(v) for k, v in seconds.items()} if isinstance(seconds, dict) else {}


def _stamp_of(spec: GoEngine, go: GoToolchain) -> dict[str, object]:
    stamp: dict[str, object] = {
        "module": spec.module,
        "version": spec.version,
        "package": spec.package,
        "method": spec.method,
        "version_vars": list(spec.version_vars),
        "go": go.version,
    }
    # Only when set, so the stamps of engines built before these fields existed still fit.
    if spec.tags:
        stamp["tags"] = list(spec.tags)
    if spec.cgo:
        stamp["cgo"] = True
    if spec.companions:
        stamp["companions"] = [list(companion) for companion in spec.companions]
    if spec.extra:
        stamp["extra"] = list(spec.extra)
    return stamp


def _beside(spec: GoEngine) -> tuple[str, ...]:
    """What the build installs in bin/ beside the binary: companions, then extra commands."""
    return (*(companion[2] for companion in spec.companions), *spec.extra_binaries)


def _stamp_fits(stamp: dict[str, object], wanted: dict[str, object]) -> bool:
    return all(stamp.get(key) == value for key, value in wanted.items())


def _build(spec: GoEngine, go: GoToolchain, target: pathlib.Path) -> dict[str, float]:
    """Build into a scratch directory beside the result, then move the binary into place."""
    target.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="build.", dir=target))
    try:
        began = time.monotonic()
        _say(spec, f"go mod download {spec.module}@{spec.version} ({go.version})")
        module_dir = _download(go, spec)
        downloaded = time.monotonic()
        out_dir = work / "out"
        out_dir.mkdir()
        if spec.method == "build":
            _build_in_copy(go, spec, module_dir, work / "src", out_dir / spec.binary)
        else:
            also = f" and {', '.join(spec.extra)}" if spec.extra else ""
            _say(spec, f"go install {spec.import_path}@{spec.version}{also} (minutes the first time)")
            _install(go, spec, out_dir)
        built = time.monotonic()
        for directory, made, installed in spec.companions:
            _say(spec, f"make -C {directory}")
            _make(spec, work / "src", directory, made, out_dir / installed)
        made_all = time.monotonic()
        (target / "bin").mkdir(exist_ok=True)
        for installed in (spec.binary, *_beside(spec)):
            os.replace(out_dir / installed, target / "bin" / installed)
        seconds = {"download": round(downloaded - began, 1), "build": round(built - downloaded, 1)}
        if spec.companions:
            seconds["companions"] = round(made_all - built, 1)
        _say(spec, f"done in {made_all - began:.0f} s: {target / 'bin' / spec.binary}")
        return seconds
    finally:
        _remove_tree(work)


def _say(spec: GoEngine, text: str) -> None:
    print(f"{spec.binary} build: {text}", file=sys.stderr, flush=True)


def _download(go: GoToolchain, spec: GoEngine) -> pathlib.Path:
    """``go mod download -json``: the module's directory in the module cache (read-only)."""
    what = f"{spec.module}@{spec.version}"
    out = _run(go, ["mod", "download", "-json", what], f"go mod download {what}", DOWNLOAD_TIMEOUT_S, check=False)
    try:
        info = json.loads(out.stdout)
    except ValueError:
        raise GoBuildError(f"go mod download {what} failed (exit {out.returncode}): {_tail(out)}") from None
    if not isinstance(info, dict) or info.get("Error") or not info.get("Dir"):
        error = info.get("Error") if isinstance(info, dict) else None
        raise GoBuildError(f"go mod download {what} failed: {error or _tail(out)}")
    return pathlib.Path(str(info["Dir"]))


def _build_in_copy(
    go: GoToolchain, spec: GoEngine, module_dir: pathlib.Path, src: pathlib.Path, output: pathlib.Path
) -> None:
    """``go build`` with the module as the main module, so its ``replace`` directives apply.

    The module cache is read-only and go may need to update go.mod or go.sum (-mod=mod
    lets it, and ignores a vendor/ directory that disagrees with go.mod): build a copy.
    """
    _say(spec, f"copy {module_dir.name} out of the module cache")
    shutil.copytree(module_dir, src, symlinks=True)
    _make_writable(src)
    package = f"./{spec.package}" if spec.package else "."
    tags = ["-tags", " ".join(spec.tags)] if spec.tags else []
    args = ["build", "-trimpath", "-mod=mod", *tags, *_ldflags(spec), "-o", str(output), package]
    # cgo: CRI-O links libseccomp (Debian's libseccomp-dev, found through pkg-config).
    env = _go_env(CGO_ENABLED="1") if spec.cgo else None
    _say(spec, f"go build {package}{' with cgo' if spec.cgo else ''} (minutes the first time)")
    _run(go, args, f"go build {spec.import_path}@{spec.version}", BUILD_TIMEOUT_S, cwd=src, env=env, spec=spec)


def _make(spec: GoEngine, src: pathlib.Path, directory: str, made: str, output: pathlib.Path) -> None:
    """A C helper of the module (CRI-O's pinns) with its own Makefile, copied to ``output``."""
    if shutil.which("make") is None:
        raise GoBuildError(f"make not found: {spec.binary} needs it for {directory}/ (scripts/test-packages.txt)")
    try:
        proc = subprocess.run(
            ["make", "-C", str(src / directory)], capture_output=True, text=True, timeout=MAKE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GoBuildError(f"make -C {directory} for {spec.binary}: {exc}") from exc
    if proc.returncode != 0 or not (src / made).is_file():
        raise GoBuildError(f"make -C {directory} for {spec.binary} failed (exit {proc.returncode}): {_tail(proc)}")
    shutil.copy2(src / made, output)


def _install(go: GoToolchain, spec: GoEngine, out_dir: pathlib.Path) -> None:
    what = f"{spec.import_path}@{spec.version}"
    # One go command for all: the packages share the module's build list and compile once.
    extra = [f"{spec.module}/{package}@{spec.version}" for package in spec.extra]
    tags = ["-tags", " ".join(spec.tags)] if spec.tags else []
    args = ["install", "-trimpath", *tags, *_ldflags(spec), what, *extra]
    _run(go, args, f"go install {what}", BUILD_TIMEOUT_S, env=_go_env(GOBIN=str(out_dir)), spec=spec)


def _ldflags(spec: GoEngine) -> list[str]:
    return ["-ldflags", " ".join(f"-X {setting}" for setting in spec.version_vars)] if spec.version_vars else []


def _run(
    go: GoToolchain,
    args: list[str],
    what: str,
    timeout: float,
    *,
    cwd: pathlib.Path | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
    spec: GoEngine | None = None,
) -> subprocess.CompletedProcess[str]:
    say = (lambda text: _say(spec, text)) if spec is not None else None
    try:
        proc = run_announced([str(go.path), *args], what, timeout, say, cwd=cwd, env=env or _go_env())
    except OSError as exc:
        raise GoBuildError(f"{what}: {exc}") from exc
    except subprocess.TimeoutExpired:
        raise GoBuildError(f"{what} with {go.version} took over {timeout:.0f}s") from None
    if check and proc.returncode != 0:
        raise GoBuildError(f"{what} with {go.version} failed (exit {proc.returncode}): {_tail(proc)}")
    return proc


def run_announced(argv: list[str], what: str, timeout: float, say: Callable[[str], None] | None, *,
                  cwd: pathlib.Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run argv to its end, output captured; ``say`` hears every minute that it is still running.
    Past ``timeout`` it is killed (TimeoutExpired), and an interrupted test run kills it too."""
    child = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    began = time.monotonic()
    while True:
        elapsed = time.monotonic() - began
        try:
            stdout, stderr = child.communicate(timeout=max(0.1, min(HEARTBEAT_S, timeout - elapsed)))
            return subprocess.CompletedProcess(argv, child.returncode, stdout, stderr)
        except subprocess.TimeoutExpired:
            elapsed = time.monotonic() - began
            if elapsed >= timeout:
                child.kill()
                child.communicate()
                raise
            if say is not None:
                say(f"{what}: still running ({elapsed:.0f} s)")
        except BaseException:
            # An interrupted test run must not leave a build behind.
            child.kill()
            child.communicate()
            raise


def _tail(proc: subprocess.CompletedProcess[str]) -> str:
    return (proc.stderr or proc.stdout).strip()[-2000:]


def _make_writable(tree: pathlib.Path) -> None:
    for path in (tree, *tree.rglob("*")):
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def _remove_tree(tree: pathlib.Path) -> None:
    if tree.exists():
        _make_writable(tree)
        shutil.rmtree(tree, ignore_errors=True)


def build_all(names: list[str]) -> int:
    """Build (or find) each named Go engine, every one that can be had when none is named;
    each step prints a line. 1 when one could not be built, after trying the rest."""
    wanted = names or [name for name, spec in engines.ENGINES.items()
                       if isinstance(spec, GoEngine) and not spec.unavailable]
    failed = 0
    for name in wanted:
        try:
            print(binary(name))
        except debs.EngineUnavailable as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            failed = 1
    return failed


if __name__ == "__main__":
    # ``python -m tests.harness.gobuild [NAME...]``: what scripts/bootstrap --test builds up front.
    sys.exit(build_all(sys.argv[1:]))

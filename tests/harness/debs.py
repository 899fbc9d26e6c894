"""Container engines unpacked from Debian packages, cached outside the repo.

The engines are fetched with ``apt-get download`` through a private apt
configuration so that the system's apt state is never read for package
selection nor modified. The mirror URI is taken from the system's apt sources
at run time, so no host name is hard-coded here.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator

from tests.harness import engines

KEYRING = pathlib.Path("/usr/share/keyrings/debian-archive-keyring.gpg")
DEB822_SOURCES = pathlib.Path("/etc/apt/sources.list.d/debian.sources")
ONE_LINE_SOURCES = pathlib.Path("/etc/apt/sources.list")
# The suite whose stanza names the main archive mirror (not -security).
REFERENCE_SUITE = "bookworm"
LISTS_MAX_AGE_S = 24 * 3600
APT_TIMEOUT_S = 600


class EngineUnavailable(Exception):
    """The requested engine cannot be fetched or unpacked here."""


# The table lives in engines.py with the Go-built engines; this module fetches its Debian ones.
EngineSpec = engines.DebianEngine
ENGINES: dict[str, EngineSpec] = engines.debian_engines()


def cache_root() -> pathlib.Path:
    """Root of the engine cache: ``$PINCTL_ENGINE_CACHE`` or ``~/.cache/pinctl/engines``."""
    env = os.environ.get("PINCTL_ENGINE_CACHE")
    if env:
        return pathlib.Path(env)
    return pathlib.Path.home() / ".cache" / "pinctl" / "engines"


def engine_dir(engine: str) -> pathlib.Path:
    """Return a directory holding the unpacked engine (``usr/bin/containerd`` ...).

    Downloads and unpacks on first use; later calls reuse the stamped copy
    without touching the network.
    """
    spec = ENGINES.get(engine)
    if spec is None:
        raise EngineUnavailable(f"unknown engine {engine!r}; known: {sorted(ENGINES)}")
    root = cache_root()
    try:
        with _locked(root / ".lock"):
            target = root / engine
            if not _stamp_matches(target, spec):
                _fetch_engine(root, engine, spec)
            return target / "root"
    except OSError as exc:
        raise EngineUnavailable(f"engine cache {root}: {exc}") from exc



@contextlib.contextmanager
def _locked(lock_path: pathlib.Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_stamp(target: pathlib.Path) -> dict[str, object]:
    try:
        data = json.loads((target / "stamp.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _stamp_matches(target: pathlib.Path, spec: EngineSpec) -> bool:
    stamp = _read_stamp(target)
    versions = stamp.get("versions")
    fetched = versions.get(spec.packages[0]) if isinstance(versions, dict) else None
    # Judged by the version unpacked, not by the pin recorded: a cache filled before pins
    # existed stays valid when its version fits.
    fits_pin = not spec.pin or (isinstance(fetched, str) and fnmatch.fnmatchcase(fetched, spec.pin))
    return (
        stamp.get("suite") == spec.suite
        and stamp.get("packages") == list(spec.packages)
        and fits_pin
        and (target / "root").is_dir()
    )


def _fetch_engine(root: pathlib.Path, engine: str, spec: EngineSpec) -> None:
    apt_dir = _prepare_apt_dir(root, spec.suite)
    _update_lists_if_stale(apt_dir)
    target = root / engine
    target.mkdir(parents=True, exist_ok=True)
    # Unpack next to the final location and rename, so a crash never leaves
    # a half-extracted tree that a later run would trust.
    staging = pathlib.Path(tempfile.mkdtemp(prefix="root.", dir=target))
    versions: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="dl.", dir=apt_dir) as work:
        for package in spec.packages:
            wanted = f"{package}={spec.pin}" if spec.pin and package == spec.packages[0] else package
            deb = _download_fresh(apt_dir, wanted, pathlib.Path(work))
            versions[package] = _deb_field(deb, "Version")
            _run(["dpkg-deb", "-x", str(deb), str(staging)], f"unpacking {deb.name}")
    shutil.rmtree(target / "root", ignore_errors=True)
    staging.rename(target / "root")
    stamp: dict[str, object] = {"suite": spec.suite, "packages": list(spec.packages), "versions": versions}
    if spec.pin:
        stamp["pin"] = spec.pin
    (target / "stamp.json").write_text(json.dumps(stamp, indent=2) + "\n")


def mirror_uri() -> str:
    """The Debian mirror the system's apt already uses (deb822 or one-line format)."""
    if DEB822_SOURCES.is_file():
        uri = _uri_from_deb822(DEB822_SOURCES.read_text())
        if uri:
            return uri
    if ONE_LINE_SOURCES.is_file():
        uri = _uri_from_one_line(ONE_LINE_SOURCES.read_text())
        if uri:
            return uri
    raise EngineUnavailable(
        f"no Debian mirror for suite {REFERENCE_SUITE!r} in {DEB822_SOURCES} or {ONE_LINE_SOURCES}"
    )


def _uri_from_deb822(text: str) -> str | None:
    for stanza in text.split("\n\n"):
        fields = _deb822_fields(stanza)
        if "deb" not in fields.get("types", "deb").split() or fields.get("enabled") == "no":
            continue
        if REFERENCE_SUITE in fields.get("suites", "").split():
            uris = fields.get("uris", "").split()
            if uris:
                return uris[0]
    return None


def _deb822_fields(stanza: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in stanza.splitlines():
        if line.startswith("#") or ":" not in line or line[:1].isspace():
            continue
        key, _, value = line.partition(":")
        fields[key.strip().lower()] = value.strip()
    return fields


def _uri_from_one_line(text: str) -> str | None:
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        # Drop an optional "[option=value ...]" block before the URI.
        if words[1].startswith("["):
            while not words[1].endswith("]"):
                words.pop(1)
            words.pop(1)
        if len(words) >= 3 and words[2] == REFERENCE_SUITE:
            return words[1]
    return None


def _prepare_apt_dir(root: pathlib.Path, suite: str) -> pathlib.Path:
    apt_dir = root / "apt" / suite
    for sub in ("state/lists/partial", "cache/archives/partial", "sources.list.d", "preferences.d"):
        (apt_dir / sub).mkdir(parents=True, exist_ok=True)
    line = f"deb [signed-by={KEYRING}] {mirror_uri()} {suite} main\n"
    sources = apt_dir / "sources.list"
    if not sources.is_file() or sources.read_text() != line:
        sources.write_text(line)
        # A changed source invalidates the lists fetched for the old one.
        (apt_dir / "lists.stamp").unlink(missing_ok=True)
    return apt_dir


def apt_options(apt_dir: pathlib.Path) -> list[str]:
    """``-o`` options that confine apt to ``apt_dir`` and leave the system untouched."""
    options = {
        "Dir::Etc::sourcelist": apt_dir / "sources.list",
        "Dir::Etc::sourceparts": apt_dir / "sources.list.d",
        "Dir::Etc::preferences": apt_dir / "preferences",
        "Dir::Etc::preferencesparts": apt_dir / "preferences.d",
        "Dir::State": apt_dir / "state",
        "Dir::State::status": "/dev/null",
        "Dir::Cache": apt_dir / "cache",
        "Debug::NoLocking": "1",
        "Acquire::Languages": "none",
        "APT::Get::List-Cleanup": "0",
    }
    if os.geteuid() == 0:
        # The _apt sandbox user cannot enter /root/.cache; avoid the warning.
        options["APT::Sandbox::User"] = "root"
    args: list[str] = []
    for key, value in options.items():
        args += ["-o", f"{key}={value}"]
    return args


def _update_lists_if_stale(apt_dir: pathlib.Path) -> None:
    stamp = apt_dir / "lists.stamp"
    if stamp.is_file() and time.time() - stamp.stat().st_mtime < LISTS_MAX_AGE_S:
        return
    _run(["apt-get", *apt_options(apt_dir), "-q", "update"], "apt-get update")
    stamp.touch()


def _download_fresh(apt_dir: pathlib.Path, package: str, work: pathlib.Path) -> pathlib.Path:
    """Download, updating the lists once first if that fails: sid replaces its packages
    often, so lists under a day old may name a file the mirror no longer has."""
    try:
        return _download(apt_dir, package, work)
    except EngineUnavailable:
        (apt_dir / "lists.stamp").unlink(missing_ok=True)
        _update_lists_if_stale(apt_dir)
    return _download(apt_dir, package, work)


def _download(apt_dir: pathlib.Path, package: str, work: pathlib.Path) -> pathlib.Path:
    before = set(work.glob("*.deb"))
    _run(["apt-get", *apt_options(apt_dir), "-q", "download", package], f"download {package}", cwd=work)
    debs = sorted(set(work.glob("*.deb")) - before)
    if len(debs) != 1:
        raise EngineUnavailable(f"apt-get download {package} produced {debs}")
    return debs[0]


def _deb_field(deb: pathlib.Path, field: str) -> str:
    return _run(["dpkg-deb", "-f", str(deb), field], f"reading {deb.name}").strip()


def _run(argv: list[str], what: str, cwd: pathlib.Path | None = None) -> str:
    try:
        proc = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=APT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineUnavailable(f"{what} failed: {exc}") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise EngineUnavailable(f"{what} failed (exit {proc.returncode}): {tail}")
    return proc.stdout

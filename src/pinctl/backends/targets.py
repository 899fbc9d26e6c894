"""What each image record's target resolves to (the image ID and the bytes below the target, for
this host's platform), read from the manifests once and then kept by digest.

Content is addressed by digest: what a target digest resolves to never changes, so an answer
read once is right for ever, in any namespace and on any containerd of the host. A long-lived
store keeps the answers in memory; every store also keeps them between runs in one file
(TargetCache), so that `pinctl ls` on a node of 10,000 images reads only the manifests of images
new since the last run. The file is trusted only as config files are (as root: root's alone, up
to /), and only whole: one entry that does not parse and the file is ignored and written again.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Callable, Iterable, Optional, Sequence

from pinctl.backends import oci
from pinctl.config.files import read_regular
from pinctl.errors import ConfigError
from pinctl.model import ResolvedTarget

CACHE_DIR_ENV = "PINCTL_CACHE_DIR"
ROOT_CACHE_DIR = "/var/cache/pinctl"
CACHE_FILE = "targets.json"
CACHE_VERSION = 1
# Enough for a node of many thousand images; past it, the answers seen longest ago go first
# (never one of the listing just made, so a larger node is still whole).
MAX_ENTRIES = 20_000
# A service saves its new answers at most this often, unless many come at once.
SAVE_SECONDS = 30.0
SAVE_BATCH = 64
# The OCI digest grammar (image-spec descriptor.md), with a bound on the encoded part.
_DIGEST = re.compile(r"[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,256}")
_LARGEST_SIZE = 2**53

# Reads JSON blobs by digest: a document, or the error text of one that cannot be read.
ReadBlobs = Callable[[Sequence[str]], dict[str, Any]]


def default_cache_path() -> Optional[str]:
    """Where the file is: $PINCTL_CACHE_DIR (empty: no file), else /var/cache/pinctl for root and
    the XDG cache directory for anyone else."""
    chosen = os.environ.get(CACHE_DIR_ENV)
    if chosen is not None:
        return os.path.join(chosen, CACHE_FILE) if chosen else None
    if os.geteuid() == 0:
        return os.path.join(ROOT_CACHE_DIR, CACHE_FILE)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pinctl", CACHE_FILE)


def platform_key() -> str:
    return "/".join(oci.host_platform())


def read_targets(read_blobs: ReadBlobs, digests: Sequence[str]) -> dict[str, ResolvedTarget]:
    """Resolve each target digest from its manifest (an index: its entry for this host)."""
    documents = read_blobs(digests)
    resolved: dict[str, ResolvedTarget] = {}
    children: dict[str, dict[str, Any]] = {}
    for digest in digests:
        doc = documents[digest]
        if isinstance(doc, str):
            resolved[digest] = ResolvedTarget(None, 0, doc)
        elif oci.is_index(doc):
            entry = oci.pick_manifest(doc)
            if entry is None:
                resolved[digest] = ResolvedTarget(None, 0, "no manifest for this host's platform")
            else:
                children[digest] = entry
        else:
            resolved[digest] = _resolved(doc, 0)
    child_docs = read_blobs(sorted({str(e.get("digest")) for e in children.values()}))
    for index_digest, entry in children.items():
        doc = child_docs[str(entry.get("digest"))]
        resolved[index_digest] = (
            ResolvedTarget(None, 0, doc) if isinstance(doc, str) else _resolved(doc, int(entry.get("size", 0)))
        )
    return resolved


def _resolved(manifest: dict[str, Any], manifest_size: int) -> ResolvedTarget:
    image_id, size = oci.config_and_size(manifest)
    return ResolvedTarget(image_id, manifest_size + size)


class TargetCache:
    """Resolved targets by digest, in memory and in the file at path (None: memory only)."""

    def __init__(self, path: Optional[str], clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self._monotonic = monotonic
        self._entries: dict[str, tuple[str, int, int]] = {}  # digest: (image ID, size, last seen)
        self._loaded = path is None
        self._new = 0
        self._dropped = False  # an answer that no longer holds: written at once
        self._saved_at = -float("inf")
        self.ignored: Optional[str] = None  # why the file on disk was not used, if it was not

    def resolve(self, digests: Iterable[str], read: Callable[[list[str]], dict[str, ResolvedTarget]],
                again: bool = False) -> dict[str, ResolvedTarget]:
        """Each digest's answer: from the cache, else read (and kept when it has no error).
        again: read them all whatever the cache holds (an answer that now fails is dropped)."""
        self._load()
        now = int(self._clock())
        wanted = set(digests)
        found: dict[str, ResolvedTarget] = {}
        for digest in () if again else wanted:
            entry = self._entries.get(digest)
            if entry is not None:
                found[digest] = ResolvedTarget(entry[0], entry[1])
                self._entries[digest] = (entry[0], entry[1], now)
        missing = sorted(wanted - found.keys())
        if missing:
            fresh = read(missing)
            found.update(fresh)
            for digest, target in fresh.items():
                if target.error is None and target.image_id is not None and _valid(digest, target.image_id, target.size):
                    self._new += self._entries.get(digest, ("", -1))[:2] != (target.image_id, target.size)
                    self._entries[digest] = (target.image_id, target.size, now)
                elif self._entries.pop(digest, None) is not None:
                    self._dropped = True
        self._bound(wanted)
        self._save()
        return found

    def __len__(self) -> int:
        return len(self._entries)

    def _bound(self, current: set[str]) -> None:
        if len(self._entries) <= MAX_ENTRIES:
            return
        others = sorted((seen, digest) for digest, (_, _, seen) in self._entries.items() if digest not in current)
        for _, digest in others[: len(self._entries) - max(MAX_ENTRIES, len(current))]:
            del self._entries[digest]

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        assert self.path is not None
        try:
            raw = read_regular(self.path, guard=True)
        except FileNotFoundError:
            return
        except (OSError, ConfigError) as err:  # foreign, not a file, unreadable: never trusted
            self.ignored = getattr(err, "message", None) or str(err)
            return
        try:
            self._entries = _parse(raw)
        except ValueError as err:
            self.ignored = f"{self.path}: {err}"

    def _save(self) -> None:
        """Write the file when there is something new (a service: not more often than every
        SAVE_SECONDS, unless SAVE_BATCH new answers wait or one was dropped), replacing it in one
        rename."""
        if self.path is None or not (self._new or self._dropped):
            return
        now = self._monotonic()
        if now - self._saved_at < SAVE_SECONDS and self._new < SAVE_BATCH and not self._dropped:
            return
        self._saved_at = now
        self._new, self._dropped = 0, False
        try:
            write_file(self.path, _dump(self._entries))
        except OSError:
            pass  # a read-only /var, a full disk: the next run reads the manifests again


def _valid(digest: str, image_id: str, size: int) -> bool:
    return bool(_DIGEST.fullmatch(digest) and _DIGEST.fullmatch(image_id)) and 0 <= size < _LARGEST_SIZE


def _parse(raw: bytes) -> dict[str, tuple[str, int, int]]:
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"not JSON ({err})") from None
    if not isinstance(document, dict) or document.get("version") != CACHE_VERSION:
        raise ValueError(f"not a version {CACHE_VERSION} target cache")
    if document.get("platform") != platform_key():
        raise ValueError(f"made for platform {document.get('platform')!r}, this host is {platform_key()}")
    entries = document.get("entries")
    if not isinstance(entries, dict) or len(entries) > 4 * MAX_ENTRIES:
        raise ValueError("no entries, or more than any cache pinctl writes")
    parsed: dict[str, tuple[str, int, int]] = {}
    digest_form = _DIGEST.fullmatch  # each entry checked inline: a node's cache has thousands
    for digest, value in entries.items():
        if type(value) is not list or len(value) != 3:
            raise ValueError(f"entry {digest[:80]!r} is not a digest with an image ID, a size and a time")
        image_id, size, seen = value
        if (type(image_id) is not str or type(size) is not int or type(seen) is not int
                or not 0 <= size < _LARGEST_SIZE or digest_form(digest) is None or digest_form(image_id) is None):
            raise ValueError(f"entry {digest[:80]!r} is not a digest with an image ID, a size and a time")
        parsed[digest] = (image_id, size, seen)
    return parsed


def _dump(entries: dict[str, tuple[str, int, int]]) -> bytes:
    document = {"version": CACHE_VERSION, "platform": platform_key(),
                "entries": dict(sorted(entries.items()))}  # tuples: JSON arrays, no copies
    return json.dumps(document, separators=(",", ":")).encode()


def write_file(path: str, data: bytes) -> None:
    """Replace the file at path by data: in a directory made 0700 if missing, and as root only
    in one that is root's alone (a directory someone else can write to is not written in)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    info = os.stat(directory)
    if os.geteuid() == 0 and (info.st_uid != 0 or info.st_mode & 0o022):
        raise PermissionError(f"{directory} is not root's alone")
    import tempfile  # here: shutil, bz2 and lzma come with it, and most commands never write the cache

    fd, temporary = tempfile.mkstemp(prefix=".targets-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise

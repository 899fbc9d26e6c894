"""What cri-proxy reports pinned: the keys of the images pinctl wants kept (PinnedKeys), as last
read (PinnedSet; feed.py keeps them current), and the rewrite of an image answer that adds
pinned=true to them without decoding every image."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from pinctl.criproxy.stats import STATS
from pinctl.model import (
    CRI_NAMESPACE,
    DOCKER_NAMESPACE,
    REASON_DOCKER_LABEL,
    REASON_LABEL,
    REASON_PATTERN,
    REASON_SANDBOX,
    RUNTIME_CONTAINERD,
    RUNTIME_DOCKER,
    ImageRow,
    LogFn,
)

if TYPE_CHECKING:
    from pinctl.node.sources import Node
    from pinctl.pins.policy import Policy

LIST_IMAGES = "/runtime.v1.ImageService/ListImages"
IMAGE_STATUS = "/runtime.v1.ImageService/ImageStatus"
# cri-api v0.37: the image list as a stream (the kubelet's CRIListStreaming gate); each message has
# ListImagesResponse's shape (images = 1), and is rewritten as one.
STREAM_IMAGES = "/runtime.v1.ImageService/StreamImages"
REFRESH_SECONDS = 2.0
# runtime.v1 Image on the wire: the tag of its id (field 1, length-delimited), and pinned=true (field 8).
ID_TAG = 0x0A
PINNED_TRUE = b"\x40\x01"
# The pin label counts only in the containerd namespace the runtime itself reads, by its CRI name.
RUNTIME_NAMESPACES = {RUNTIME_CONTAINERD: CRI_NAMESPACE, RUNTIME_DOCKER: DOCKER_NAMESPACE}


@dataclass
class ProxySetup:
    """What a (re)load of the configuration gives the proxy."""

    open_node: Callable[[], Node]
    policy: Policy
    # The paths whose change asks for a reload (service.configfiles.watched_paths); none: SIGHUP only.
    config_paths: Sequence[str] = ()


@dataclass(frozen=True)
class PinnedKeys:
    """What to report pinned, keyed as check joins CRI images with rows (so that check through
    the proxy agrees): image IDs first, then names for an image whose ID pinctl does not know."""

    ids: frozenset[str]
    known_ids: frozenset[str]
    names: frozenset[str]
    # The IDs as they appear on the wire, for answers read without decoding each image.
    id_bytes: frozenset[bytes] = field(init=False, compare=False)
    known_id_bytes: frozenset[bytes] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "id_bytes", frozenset(key.encode() for key in self.ids))
        object.__setattr__(self, "known_id_bytes", frozenset(key.encode() for key in self.known_ids))

    def __bool__(self) -> bool:
        return bool(self.ids or self.names)


def pinned_keys(rows: Sequence[ImageRow], runtime_name: str) -> PinnedKeys:
    label_namespace = RUNTIME_NAMESPACES.get(runtime_name)
    wanted = [row for row in rows if any(counts(reason.kind, row, label_namespace) for reason in row.reasons)]
    return PinnedKeys(frozenset(row.image_id for row in wanted if row.image_id),
                      frozenset(row.image_id for row in rows if row.image_id),
                      frozenset(key for row in wanted for key in (row.digest, row.ref) if key))


# What a read's keys become before they are kept: each set joined into one string (see settled).
Packed = tuple["str | frozenset[str]", ...]
SEPARATOR = "\n"  # in no reference or image ID; a key that holds one is kept as it is


def packed(keys: PinnedKeys) -> Packed:
    """The three sets of keys, each as one string: one block of memory, holding no string of
    the read it came from."""
    return tuple(_pack(part) for part in (keys.ids, keys.known_ids, keys.names))


def _pack(keys: frozenset[str]) -> str | frozenset[str]:
    text = SEPARATOR.join(keys)
    return text if text.count(SEPARATOR) == max(len(keys) - 1, 0) else keys


def _unpack(part: str | frozenset[str]) -> frozenset[str]:
    if isinstance(part, frozenset):
        return part
    return frozenset(part.split(SEPARATOR)) if part else frozenset()


def settled(read: Packed, previous: Optional[PinnedKeys]) -> PinnedKeys:
    """The keys of a read as the proxy keeps them until the next one: each set equal to the one
    held already is that one; a new one is made from the packed strings, once the read's rows,
    records and protobuf wrappers are all freed.

    Why: kept as they come, thousands of strings of a read hold memory pools of that read
    resident (a pool is given back only when all its objects are freed), and the next read,
    after the next burst of image events, needs pools of its own. At 10,000 images, with image events
    between the reads, the proxy's peak over six reads was 135 MiB with the keys kept as read
    and 130 MiB with them packed (service/memory.py took it from 146 to 135 before)."""
    fresh = [_unpack(part) for part in read]
    if previous is None:
        return PinnedKeys(*fresh)
    held = (previous.ids, previous.known_ids, previous.names)
    kept = [old if new == old else new for new, old in zip(fresh, held)]
    if all(new is old for new, old in zip(kept, held)):
        return previous  # the usual case: nothing changed, nothing new is kept
    keys = PinnedKeys(*kept)
    for encoded, decoded in (("id_bytes", "ids"), ("known_id_bytes", "known_ids")):
        if getattr(keys, decoded) is getattr(previous, decoded):
            object.__setattr__(keys, encoded, getattr(previous, encoded))
    return keys


def counts(kind: str, row: ImageRow, label_namespace: Optional[str]) -> bool:
    """Whether a reason of the row makes the proxy report the image pinned."""
    if kind == REASON_LABEL:
        return label_namespace is not None and row.namespace == label_namespace
    return kind in (REASON_PATTERN, REASON_DOCKER_LABEL, REASON_SANDBOX)


def mark_pinned(images: Any, keys: PinnedKeys) -> int:
    """Set pinned on each runtime.v1 Image pinctl wants kept; how many changed.

    An image whose ID pinctl has rows for is decided by its ID alone: every row of that ID has
    its names, so they add nothing, and reading each image's tags would cost more than the
    rest of the call on a node with 1,000 images."""
    changed = 0
    ids, known, names = keys.ids, keys.known_ids, keys.names
    for image in images:
        if image.pinned:
            continue
        image_id = image.id
        if image_id in ids or (image_id not in known and names and (
                not names.isdisjoint(image.repo_tags) or not names.isdisjoint(image.repo_digests))):
            image.pinned = True
            changed += 1
    STATS.images_marked += changed
    return changed


def rewrite(method: str, reply: bytes, keys: PinnedKeys) -> bytes:
    """The reply with pins added; the very same bytes when nothing changes."""
    from pinctl.proto import cri_pb2

    if method in (LIST_IMAGES, STREAM_IMAGES):
        return _rewrite_listing(reply, keys)
    status = cri_pb2.ImageStatusResponse.FromString(reply)
    if status.HasField("image") and mark_pinned([status.image], keys):
        return status.SerializeToString()
    return reply


def _rewrite_listing(reply: bytes, keys: PinnedKeys) -> bytes:
    """ListImages' answer with each image kept as its bytes: one to pin gets field 8 (pinned)
    appended, and a reader takes the last value of a field. Decoding and encoding all 1,000
    images of a node costs half a millisecond; this, a tenth of that when few are pinned."""
    from pinctl.proto import cri_pb2, cri_raw_pb2

    listed = cri_raw_pb2.ListImagesResponse.FromString(reply)
    images = listed.images
    changed = 0
    for index in _undecided(images, keys):
        image = images[index]
        if mark_pinned([cri_pb2.Image.FromString(image)], keys):
            images[index] = image + PINNED_TRUE
            changed += 1
    return listed.SerializeToString() if changed else reply


def _undecided(images: Sequence[bytes], keys: PinnedKeys) -> list[int]:
    """Where the images are that their ID alone does not rule out, found without a Python step
    per image: encoders write the id (field 1) first, and a runtime's IDs share one length.
    Answers that do not look like that have every image decoded."""
    first = images[0] if images else b""
    if len(first) < 2 or first[0] != ID_TAG or first[1] >= 0x80 or \
            sum(map(bytes.startswith, images, repeat(first[:2]))) != len(images):
        return list(range(len(images)))
    ids = list(map(itemgetter(slice(2, 2 + first[1])), images))
    undecided = keys.id_bytes.intersection(ids)
    if keys.names:
        undecided = undecided.union(set(ids) - keys.known_id_bytes)
    return [index for index, image_id in enumerate(ids) if image_id in undecided] if undecided else []


class PinnedSet:
    """The keys of the images to report pinned, as last read. Reads are made by the feed's
    reader (feed.py), never by a call; a RemoveImage reads afresh (rows_now)."""

    def __init__(self, load: Callable[[], ProxySetup], runtime_name: Callable[[], str], log: LogFn,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._load = load
        self._runtime_name = runtime_name
        self._log = log
        self._clock = clock
        self._setup: Optional[ProxySetup] = None
        self._node: Optional[Node] = None
        self._keys: Optional[PinnedKeys] = None
        self._lock = threading.Lock()
        self._failing = False
        # Set by a reload until a read with the new config succeeds: the keys held are the old
        # config's, so a failed read then drops them rather than keep them.
        self._config_changed = False
        self.reads = 0
        self.failures = 0
        self.ok_reads = 0
        self.last_error = ""
        self._read_ok_at: Optional[float] = None
        self.reloads: Counter[str] = Counter({"ok": 0, "failed": 0})
        self.last_reload_ok = True

    def current(self) -> Optional[PinnedKeys]:
        """The keys as last read, without reading: None when they could not be read."""
        return self._keys

    def refresh(self) -> Optional[PinnedKeys]:
        """Read the keys now; None when they cannot be read."""
        with self._lock:
            self._read()
            return self._keys

    def setup(self) -> ProxySetup:
        """The configuration in use, read first if it has not been; raises when it cannot be."""
        with self._lock:
            return self._loaded()

    def _loaded(self) -> ProxySetup:
        """The configuration, read first when it has not been (the caller holds the lock)."""
        if self._setup is None:
            self._setup = self._load()
            self._log("info", "config loaded", patterns=len(self._setup.policy.patterns))
        return self._setup

    def prepare(self) -> None:
        """Read the configuration now rather than at the first read of the pins, so that its paths
        can be polled from the start; if it cannot be read, the next read of the pins tries again."""
        with self._lock:
            if self._setup is not None:
                return
            try:
                self._setup = self._load()
            except Exception as err:  # noqa: BLE001 - the next read of the pins reads it again and says why
                self._log("error", "cannot read the config; trying again at the next read of the pins", error=str(err))
                return
        self._log("info", "config loaded", patterns=len(self._setup.policy.patterns))

    def config_paths(self) -> Sequence[str]:
        setup = self._setup
        return setup.config_paths if setup is not None else ()

    def reload(self, then: Callable[[], object] = lambda: None) -> bool:
        """Read the configuration again (SIGHUP, a changed file). One that cannot be read is
        logged and counted, and the one in use stays. then runs once the new one is in place and
        before "config reloaded" is logged (the feed reads the pins with it and the relay takes
        them there), so that every call after that line uses it."""
        try:
            setup = self._load()
        except Exception as err:  # noqa: BLE001 - whatever fails, the policy in use stays
            self.reloads["failed"] += 1
            self.last_reload_ok = False
            self._log("error", "config reload failed, keeping the previous one", error=str(err))
            return False
        with self._lock:
            self._setup = setup
            self._config_changed = True
            self._close_node()
        then()
        self.reloads["ok"] += 1
        self.last_reload_ok = True
        self._log("info", "config reloaded", patterns=len(setup.policy.patterns))
        return True

    def close(self) -> None:
        with self._lock:
            self._close_node()

    def _opened(self) -> tuple[Node, ProxySetup]:
        """The node to read and the configuration (the caller holds the lock)."""
        setup = self._loaded()
        if self._node is None:
            self._node = setup.open_node()
        self._node.forget_lists()  # the node stays open between reads; Docker's image list must not
        return self._node, setup

    def _read(self) -> None:
        self.reads += 1
        try:
            node, setup = self._opened()
            self._keys = settled(self._read_keys(node, setup.policy), self._keys)
        except Exception as err:  # noqa: BLE001 - availability first: whatever fails, answers pass through
            self._failed(err)
        else:
            self._succeeded()

    def _succeeded(self) -> None:
        if self._failing and self._keys is not None:
            self._log("info", "pins readable again; adding them", pinned_images=len(self._keys.ids))
        self._failing = self._config_changed = False
        self.ok_reads += 1
        self._read_ok_at = self._clock()

    def rows_now(self) -> Optional[tuple[list[ImageRow], str]]:
        """The rows read now, not from the cache, with the runtime's name: a RemoveImage is
        decided on what holds when it comes (a label added a moment ago defends the image, one
        removed a moment ago no longer does). The keys are refreshed from the same read. None
        when the pins cannot be read."""
        with self._lock:
            self.reads += 1
            try:
                node, setup = self._opened()
                rows = node.rows(setup.policy, runtime_sizes=False).rows
                runtime_name = self._runtime_name()
                self._keys = settled(packed(pinned_keys(rows, runtime_name)), self._keys)
            except Exception as err:  # noqa: BLE001 - the caller decides what an unreadable pin means
                self._failed(err)
                return None
            self._succeeded()
            return list(rows), runtime_name

    def _read_keys(self, node: Node, policy: Policy) -> Packed:
        """The keys of a fresh read, packed: its rows and their strings are freed on return,
        before settled() makes the sets that are kept."""
        return packed(pinned_keys(node.rows(policy, runtime_sizes=False).rows, self._runtime_name()))

    def _failed(self, err: Exception) -> None:
        """A read failed. The keys of the last read that worked stay in use: a runtime restarting
        under the proxy must not make its next answers drop every pin. After a reload they are
        the old config's, and go."""
        self.failures += 1
        self.last_error = str(err) or type(err).__name__
        if self._config_changed:
            self._keys = None
        self._close_node()
        if not self._failing:
            effect = "answers pass through unchanged" if self._keys is None else "answers keep the pins read last"
            self._log("error", f"cannot read pins; {effect}", error=str(err))
        self._failing = True

    # -- read by /readyz and scrapes, never reading anything themselves ----------------------

    @property
    def latest(self) -> Optional[PinnedKeys]:
        """The keys as last read; None while unreadable or before the first read."""
        return self._keys

    @property
    def failing(self) -> bool:
        """Whether the last read failed (answers pass through unchanged until one succeeds)."""
        return self._failing

    def age(self) -> Optional[float]:
        """Seconds since the last read that succeeded; None before the first."""
        read_at = self._read_ok_at
        return None if read_at is None else max(0.0, self._clock() - read_at)

    def _close_node(self) -> None:
        if self._node is not None:
            try:
                self._node.close()
            except Exception:  # noqa: BLE001 - a broken connection cannot stop a reconnect
                pass
            self._node = None

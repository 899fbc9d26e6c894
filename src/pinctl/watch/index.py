"""What the watcher must know of each reference before it goes: its image, size and pins.

containerd's `/images/delete` event names the reference and nothing else, and by then its
content may be gone too (the CRI's RemoveImage deletes it synchronously). So the watcher keeps,
per reference, its target digest and how it was pinned, and per target digest the image ID and
size (backends/targets.py resolves those and keeps them by digest): filled at each full sync,
kept current from create and update events.

Kept small for a node of 10,000 images: a tuple of a shared string and an int per reference, a
tuple per target, and the few references an archive of import_dirs or the runtime's own config
names in dicts of their own. About 4 MiB at 10,000 references (tests/unit/test_watch_journal.py).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Union

from pinctl.model import MANAGED_LABEL, MANAGED_VALUE
from pinctl.pins import labels as pin_labels

# flags: how a reference was pinned the moment before it went
FLAG_LABEL = 1  # it carried the CRI's pin label
FLAG_SYNC = 2  # ... written by pinctl sync (the policy's), not by hand
FLAG_CRI = 4  # the runtime's CRI reported it pinned (CRI-O, whose pins are its files)
# Not a label anyone writes: how a runtime without labels (CRI-O) hands its CRI's pinned to flags_of.
CRI_PINNED = "io.pinctl.watch.cri-pinned"
ARCHIVE_LABEL = "io.pinctl.archive"  # imports.dirs.ARCHIVE_LABEL: the import_dirs archive that gave it


@dataclass(frozen=True)
class Gone:
    """One reference that went, with what the index knew of it."""

    namespace: str
    ref: str
    digest: str
    image_id: str  # "" when its target could not be resolved
    size: Optional[int]
    flags: int
    archive: str  # the import_dirs archive that gave it, ""
    config: str  # where the runtime's own config pins it ("" none)


Entry = Union[str, tuple[str, int]]


def digest_of(entry: Entry) -> str:
    return entry if isinstance(entry, str) else entry[0]


def flags_of(labels: Mapping[str, str]) -> int:
    if not labels:
        return 0
    flags = FLAG_LABEL if pin_labels.carries_pin(dict(labels)) else 0
    if labels.get(MANAGED_LABEL) == MANAGED_VALUE:
        flags |= FLAG_SYNC
    if CRI_PINNED in labels:
        flags |= FLAG_CRI
    return flags


class ImageIndex:
    def __init__(self) -> None:
        # namespace: ref: its target digest, or (target digest, flags) when it has flags (few do)
        self._refs: dict[str, dict[str, Entry]] = {}
        self._targets: dict[str, tuple[str, int]] = {}  # target digest: (image ID, size; -1 unknown)
        self._archives: dict[tuple[str, str], str] = {}  # (namespace, ref): archive path
        self._config: dict[tuple[str, str], str] = {}  # (namespace, ref): the config entry's file and line

    def __len__(self) -> int:
        return sum(len(refs) for refs in self._refs.values())

    def namespaces(self) -> list[str]:
        return list(self._refs)

    def refs(self, namespace: str) -> dict[str, Entry]:
        """The namespace's references (each entry read with digest_of)."""
        return self._refs.get(namespace, {})

    # -- filling ---------------------------------------------------------------------------

    def replace(self, namespace: str, records: Iterable[tuple[str, str, Mapping[str, str]]],
                config: Mapping[str, str] = {}) -> list[Gone]:
        """The namespace as a full listing found it: (name, target digest, labels) of each record,
        and the runtime config's entries naming references (name: where). Returns the references
        the index held that the listing lacks: they went while nobody was looking."""
        before = self._refs.get(namespace)
        fresh: dict[str, Entry] = {}
        self._archives = {key: path for key, path in self._archives.items() if key[0] != namespace}
        for name, digest, labels in records:
            self._put(fresh, namespace, name, digest, labels)
        self._config = {key: where for key, where in self._config.items() if key[0] != namespace}
        self._config.update({(namespace, name): where for name, where in config.items()})
        gone: list[Gone] = []
        if before:
            gone = [self._gone(namespace, name, entry, "") for name, entry in before.items() if name not in fresh]
        self._refs[namespace] = fresh
        self._drop_unused_targets()
        return gone

    def put(self, namespace: str, name: str, digest: str, labels: Mapping[str, str]) -> None:
        self._put(self._refs.setdefault(namespace, {}), namespace, name, digest, labels)

    def relabel(self, namespace: str, name: str, labels: Mapping[str, str]) -> bool:
        """New labels on a known reference whose target is known not to have moved; False if unknown."""
        refs = self._refs.get(namespace)
        entry = refs.get(name) if refs is not None else None
        if refs is None or entry is None:
            return False
        self._put(refs, namespace, name, digest_of(entry), labels)
        return True

    def _put(self, refs: dict[str, Entry], namespace: str, name: str, digest: str,
             labels: Mapping[str, str]) -> None:
        # Interned: the references of one image (and their events) share one copy of its digest.
        flags = flags_of(labels)
        refs[name] = (sys.intern(digest), flags) if flags else sys.intern(digest)
        archive = labels.get(ARCHIVE_LABEL) if labels else None
        if archive:
            self._archives[(namespace, name)] = archive
        else:
            self._archives.pop((namespace, name), None)

    def unresolved(self, digests: Iterable[str]) -> list[str]:
        return sorted({d for d in digests if d not in self._targets})

    def resolved(self, digest: str, image_id: Optional[str], size: Optional[int]) -> None:
        if image_id:  # an error is not kept: the next event or full sync tries again
            self._targets[digest] = (image_id, -1 if size is None else size)

    # -- reading -----------------------------------------------------------------------------

    def take(self, namespace: str, name: str) -> Optional[Gone]:
        """The reference went: what was known of it, and it is forgotten. None if never known."""
        refs = self._refs.get(namespace)
        entry = refs.pop(name, None) if refs is not None else None
        if entry is None:
            return None
        return self._gone(namespace, name, entry, self._archives.pop((namespace, name), ""))

    def holds_image(self, namespace: str, image_id: str, digest: str) -> bool:
        """Whether a reference of that image is still there (by ID; by target digest when the ID is unknown)."""
        for entry in self._refs.get(namespace, {}).values():
            ref_digest = digest_of(entry)
            if ref_digest == digest:
                return True
            if image_id and self._targets.get(ref_digest, ("",))[0] == image_id:
                return True
        return False

    def _gone(self, namespace: str, name: str, entry: Entry, archive: str) -> Gone:
        digest, flags = (entry, 0) if isinstance(entry, str) else entry
        image_id, size = self._targets.get(digest, ("", -1))
        archive = archive or self._archives.pop((namespace, name), "")
        return Gone(namespace, name, digest, image_id, None if size < 0 else size, flags, archive,
                    self._config.get((namespace, name), ""))

    def _drop_unused_targets(self) -> None:
        used = {digest_of(entry) for refs in self._refs.values() for entry in refs.values()}
        for digest in [d for d in self._targets if d not in used]:
            del self._targets[digest]


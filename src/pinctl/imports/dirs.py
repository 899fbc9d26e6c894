"""Directories of image archives kept true, as k3s keeps agent/images, on any runtime: sync
imports each archive (once: an archive already imported is recognised by its stamp) and pins
every reference it names, marking each pin as the archive's own; sync --prune unpins the
references an archive no longer gives (it was removed, or replaced by a version that names
other references). Nothing is ever deleted: the kubelet's GC may then take the images.

Ownership is two labels on each reference, beside the pin: ARCHIVE_LABEL, the archive's path,
and STAMP_LABEL, the archive file's size, modification time and inode when it was imported.
sync --prune only ever touches references carrying ARCHIVE_LABEL for an archive of a directory
it could read; a pin set by hand or by another tool (a pin label without the mark) is left
alone and never taken over. The directories and archives are held to the StrictModes checks the
config files are (pinctl.config.files): as root, root's alone, and every directory up to /.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Callable, Optional, Sequence, cast

from pinctl.config.files import NotRegularFile, list_directory, open_guarded, os_error_text
from pinctl.errors import ConfigError
from pinctl.imports.archive import ArchiveRefused
from pinctl.imports.run import ImportItem, ImportRequest, ImportRun, ImportTarget
from pinctl.model import (ACTION_ALREADY_PINNED, ACTION_FAILED, ACTION_PINNED, ACTION_PRUNED, PIN_LABEL, PIN_VALUE,
                          VERDICT_ALREADY, VERDICT_WRITTEN, Action, ItemResult, LabelChange, StoredImage)
from pinctl.pins import labels as pin_labels

if TYPE_CHECKING:
    from pinctl.backends import ImageStore
    from pinctl.node.sources import Node

ARCHIVE_LABEL = "io.pinctl.archive"
STAMP_LABEL = "io.pinctl.archive.stamp"
# What an archive in a directory is named; anything else there (notes, a .partial download,
# hidden files) is not read.
SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.zstd", ".tzst")


@dataclass(frozen=True)
class Found:
    path: str
    stamp: str


@dataclass
class Scan:
    archives: list[Found] = field(default_factory=list)
    # Directories listed whole: only their archives' pins may be pruned.
    readable: set[str] = field(default_factory=set)
    failed: list[ImportItem] = field(default_factory=list)


@dataclass
class DirsReport:
    imports: list[ImportItem] = field(default_factory=list)
    results: list[ItemResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def stamp_of(st: os.stat_result) -> str:
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"


def scan(directories: Sequence[str], namespace: str) -> Scan:
    """The archives of each directory, in name order; a directory that cannot be read (or that
    StrictModes refuses) is one failed item, and its archives' pins are then left as they are."""
    found = Scan()
    for raw in dict.fromkeys(os.path.abspath(d) for d in directories):
        try:
            names = list_directory(raw)
        except ConfigError as err:
            found.failed.append(ImportItem(raw, "", namespace, "failed", str(err)))
            continue
        except OSError as err:
            found.failed.append(ImportItem(raw, "", namespace, "failed",
                                           f"cannot read import directory {raw}: {os_error_text(err)}"))
            continue
        if names is None:
            found.failed.append(ImportItem(raw, "", namespace, "failed", f"import directory {raw} does not exist"))
            continue
        found.readable.add(raw)
        for name in sorted(names):
            if name.startswith(".") or not name.endswith(SUFFIXES):
                continue
            path = os.path.join(raw, name)
            try:
                st = os.stat(path)
            except OSError as err:
                found.failed.append(ImportItem(path, "", namespace, "failed", f"cannot read {path}: {os_error_text(err)}"))
                continue
            if stat.S_ISREG(st.st_mode):
                found.archives.append(Found(path, stamp_of(st)))
    return found


class OwnedLabels:
    """import's label side for a directory's archive: the pin, and the marks saying whose it is."""

    def __init__(self, store: Callable[[str], Optional[ImageStore]], stamps: dict[str, str]) -> None:
        self.store = store
        # Each archive's stamp as read from the file opened for its import.
        self.stamps = stamps
        self.archive = ""
        self.named: list[str] = []

    def pin(self, namespace: str, ref: str) -> tuple[str, Optional[str]]:
        self.named.append(ref)
        store = self.store(namespace)
        records = store.get_images(namespace, [ref]) if store is not None else []
        if store is None or not records:
            return ACTION_FAILED, f"no record {ref} in {namespace} after the import"
        (record,) = records
        if pin_labels.carries_pin(record.labels) and ARCHIVE_LABEL not in record.labels:
            return ACTION_ALREADY_PINNED, None  # someone else's pin: left theirs
        wanted: LabelChange = {PIN_LABEL: PIN_VALUE, ARCHIVE_LABEL: self.archive,
                               STAMP_LABEL: self.stamps.get(self.archive, "")}
        change = {key: value for key, value in wanted.items() if record.labels.get(key) != value}
        if not change:
            return ACTION_ALREADY_PINNED, None
        (outcome,) = store.set_labels(namespace, [(record, change)])
        if outcome.verdict not in (VERDICT_WRITTEN, VERDICT_ALREADY):
            return ACTION_FAILED, outcome.detail or outcome.verdict
        return (ACTION_PINNED if PIN_LABEL in change else ACTION_ALREADY_PINNED), None


def sync_dirs(node: Node, target: ImportTarget, request: ImportRequest, directories: Sequence[str], prune: bool,
              dry_run: bool, progress: Callable[[str, str], None] = lambda _a, _s: None,
              finished: Callable[[ImportItem], None] = lambda _i: None) -> DirsReport:
    """Import and pin what the directories hold; with prune, unpin what their archives no longer give."""
    namespace = target.namespace
    found = scan(directories, namespace)
    report = DirsReport(imports=list(found.failed))
    stores: dict[str, Optional[ImageStore]] = {}

    def store_of(ns: str) -> Optional[ImageStore]:
        if ns not in stores:
            view = node.view_of(ns)
            stores[ns] = view.store if view is not None else None
        return stores[ns]

    owned = _owned(store_of(namespace), namespace)
    stamps: dict[str, str] = {}
    labels = OwnedLabels(store_of, stamps)
    job = ImportRun(target, labels, ImportRequest((), True, request.platforms, request.all_platforms,
                                                  request.max_usage, (namespace,), request.snapshotter,
                                                  request.timeout), progress, finished,
                    opener=lambda path: _open(path, stamps))
    given: dict[str, Optional[set[str]]] = {}  # what each archive names now; None: not known (it failed)
    for archive in found.archives:
        records = owned.get(archive.path, [])
        if records and all(r.labels.get(STAMP_LABEL) == archive.stamp and pin_labels.carries_pin(r.labels)
                           for r in records):
            given[archive.path] = {r.name for r in records}
            for record in records:
                report.imports.append(ImportItem(archive.path, record.name, namespace, "present",
                                                 pin=ACTION_ALREADY_PINNED, digest=record.target.digest))
                report.results.append(ItemResult(namespace, record.name, ACTION_ALREADY_PINNED))
            continue
        if dry_run:
            report.notes.append(f"sync --dry-run: would import {archive.path}")
            given[archive.path] = None
            continue
        labels.archive, labels.named = archive.path, []
        items = job.one(archive.path)
        report.imports += items
        labels_written = [i for i in items if i.ref]
        report.results += [ItemResult(namespace, i.ref, cast(Action, i.pin), i.why) for i in labels_written
                           if i.pin is not None]
        ok = bool(items) and all(i.action != "failed" for i in items)
        given[archive.path] = {i.ref for i in items if i.ref} if ok else None
    report.notes += job.notes
    if prune:
        report.results += _prune(store_of(namespace), namespace, owned, given, found.readable, dry_run)
    return report


def _owned(store: Optional[ImageStore], namespace: str) -> dict[str, list[StoredImage]]:
    if store is None:
        return {}
    found: dict[str, list[StoredImage]] = {}
    for record in store.list_images(namespace):
        archive = record.labels.get(ARCHIVE_LABEL)
        if archive:
            found.setdefault(archive, []).append(record)
    return found


def _prune(store: Optional[ImageStore], namespace: str, owned: dict[str, list[StoredImage]],
           given: dict[str, Optional[set[str]]], readable: set[str], dry_run: bool) -> list[ItemResult]:
    """Unpin each reference an archive of a readable directory no longer gives: the archive is
    gone, or its new version names other references. An archive that failed this time keeps its
    pins (what it gives is not known), and so does one of a directory not listed."""
    if store is None:
        return []
    stale: list[StoredImage] = []
    for archive, records in sorted(owned.items()):
        if os.path.dirname(archive) not in readable:
            continue
        if archive in given and given[archive] is None:
            continue
        names = given.get(archive) or set()
        stale += [r for r in records if r.name not in names]
    if not stale:
        return []
    current = {r.name: r for r in store.get_images(namespace, [r.name for r in stale])}
    changes: list[tuple[StoredImage, LabelChange]] = []
    for record in stale:
        now = current.get(record.name)
        if now is not None and now.labels.get(ARCHIVE_LABEL) == record.labels.get(ARCHIVE_LABEL):
            changes.append((now, {key: None for key in (PIN_LABEL, ARCHIVE_LABEL, STAMP_LABEL) if key in now.labels}))
    if dry_run:
        return [ItemResult(namespace, record.name, ACTION_PRUNED) for record, _ in changes]
    outcomes = store.set_labels(namespace, changes) if changes else []
    return [ItemResult(namespace, record.name, ACTION_PRUNED) if outcome.verdict in (VERDICT_WRITTEN, VERDICT_ALREADY)
            else ItemResult(namespace, record.name, ACTION_FAILED, outcome.detail or outcome.verdict)
            for (record, _), outcome in zip(changes, outcomes)]


def _open(path: str, stamps: dict[str, str]) -> IO[bytes]:
    """The archive held to StrictModes, as a config file is; its stamp read from what was opened."""
    try:
        fd = open_guarded(path)
    except ConfigError as err:
        raise ArchiveRefused(path, "", f"refused: {err}") from None
    except NotRegularFile as err:
        raise ArchiveRefused(path, "", f"is {err.kind}, not a regular file") from None
    except OSError as err:
        raise ArchiveRefused(path, "", f"cannot be opened: {os_error_text(err)}") from None
    stamps[path] = stamp_of(os.fstat(fd))
    return os.fdopen(fd, "rb", buffering=1024 * 1024)


"""sync --watch records every image deletion in the journal (pinctl.journal).

The references of one image that go within a moment of each other (the kubelet's RemoveImage by
ID removes every reference, and containerd sends one event each) are held for SETTLE_S after
the last of them, then written as one Deletion: by then cri-proxy has written the RemoveImage
that caused it, if it saw one (pinctl.journal.attribution joins the two). A journal that cannot
be written costs one warning per cause, never the watcher; the metric counts the deletion anyway.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from pinctl.errors import PinctlError
from pinctl.journal import Deletion, Entry, RemoveRequest, decode, kubelet_log, presence
from pinctl.journal.attribution import JOIN_AFTER_S, JOIN_BEFORE_S, attribute
from pinctl.journal.store import CURRENT, Journal, rotated
from pinctl.model import LogFn
from pinctl.pins.policy import Policy, matches_ids
from pinctl.watch.index import FLAG_CRI, FLAG_LABEL, FLAG_SYNC, Gone

# After the last reference of an image went, wait this long for more of its references and for
# cri-proxy's entry of the RemoveImage (written once the runtime answered) before writing.
SETTLE_S = 3.0
# Pending deletions held at most: past it the oldest are written at once (a prune of thousands).
PENDING_MAX = 4096
WANTED_PIN = "pin"
# How much of the journal's end is read for cri-proxy's requests: a minute of a kubelet removing
# images one after another is far less (an entry is about 250 bytes).
REQUESTS_TAIL = 512 * 1024
REQUEST_MARK = b'"kind":"remove-request"'


@dataclass
class _Pending:
    runtime: str
    namespace: str  # the index's (watch.index) namespace
    shown: str  # the journal's: containerd's namespace, "" for a runtime without namespaces
    image_id: str
    digest: str
    size: Optional[int]
    first: float
    last: float
    live: bool  # seen going (an event), not found missing by a full listing
    refs: list[str] = field(default_factory=list)
    flags: int = 0
    archives: list[str] = field(default_factory=list)
    config: list[str] = field(default_factory=list)
    cri_pinned: bool = False


def wanted_reasons(policy: Policy, refs: Sequence[str], image_id: str, flags: int, archives: Sequence[str]) -> tuple[str, ...]:
    """Why pinctl wanted the image kept: each policy pattern naming a reference (or the image ID,
    in the dialects that match IDs), each import_dirs directory whose archive gave it, and `pin`
    for a pin label set by hand (not sync's, not an archive's)."""
    found: list[str] = []
    if policy:
        names = list(refs) + ([image_id] if image_id else [])
        hits = policy.matcher.match(names)
        indexes: set[int] = set()
        for position, hit in enumerate(hits):
            is_id = position >= len(refs)
            indexes.update(i for i in hit if not is_id or matches_ids(policy.patterns[i]))
        found += [f"pattern {policy.patterns[i].text}" for i in sorted(indexes)]
    found += [f"import_dirs {os.path.dirname(path)}" for path in dict.fromkeys(archives)]
    if flags & FLAG_LABEL and not flags & FLAG_SYNC and not archives:
        found.append(WANTED_PIN)
    return tuple(dict.fromkeys(found))


def pinned_reasons(flags: int, config: Sequence[str], cri_pinned: bool) -> tuple[str, ...]:
    found: list[str] = []
    if flags & FLAG_LABEL:
        found.append("label")
    found += [f"runtime config {where}" for where in dict.fromkeys(config)]
    if cri_pinned or flags & FLAG_CRI:
        found.append("cri")
    return tuple(found)


class DeletionRecorder:
    """Collects the references that went, and writes one Deletion per image once they settle."""

    def __init__(self, history_dir: str, log: LogFn, on_deleted: Callable[[Deletion], None],
                 clock: Callable[[], float] = time.time) -> None:
        self.journal = Journal(history_dir)
        self.history_dir = history_dir
        self.log = log
        self.on_deleted = on_deleted
        self.clock = clock
        self._pending: dict[tuple[str, str, str], _Pending] = {}
        self._warned: set[str] = set()

    def retarget(self, history_dir: str) -> None:
        """The config was reloaded: history_dir may have changed."""
        if history_dir != self.history_dir:
            self.journal = Journal(history_dir)
            self.history_dir = history_dir

    # -- collecting ------------------------------------------------------------------------

    def gone(self, runtime: str, item: Gone, live: bool = True, cri_pinned: bool = False,
             since: Optional[float] = None, namespace: Optional[str] = None) -> None:
        """One reference went. live: seen going now; else found missing by a full listing
        (since: when the one before it was made, the earliest it can have gone). namespace: the
        one the journal names, when not the index's (Docker's own store and CRI-O have none)."""
        now = self.clock()
        key = (runtime, item.namespace, item.image_id or item.digest)
        pending = self._pending.get(key)
        if pending is None:
            shown = item.namespace if namespace is None else namespace
            pending = self._pending[key] = _Pending(runtime, item.namespace, shown, item.image_id, item.digest, item.size,
                                                    now if since is None else since, now, live)
        pending.last = now
        if item.ref not in pending.refs:
            pending.refs.append(item.ref)
        pending.flags |= item.flags
        pending.cri_pinned |= cri_pinned
        if item.archive:
            pending.archives.append(item.archive)
        if item.config:
            pending.config.append(item.config)
        if pending.size is None:
            pending.size = item.size

    def seconds_to_due(self) -> Optional[float]:
        """How long until the next pending deletion is due; None when none is pending."""
        if not self._pending:
            return None
        now = self.clock()
        return max(0.0, min(p.last for p in self._pending.values()) + SETTLE_S - now)

    def pending(self) -> int:
        return len(self._pending)

    # -- writing ---------------------------------------------------------------------------

    def flush(self, policy: Policy, still_there: Callable[[str, str, str], bool], force: bool = False,
              kubelet_log_path: Optional[str] = None) -> list[Deletion]:
        """Write every pending deletion that has settled (all, with force). still_there(namespace,
        image ID, digest) says whether a reference of the image is left (an untag);
        kubelet_log_path: the kubelet's log, read (once) when no cri-proxy serves."""
        now = self.clock()
        due = [key for key, p in self._pending.items()
               if force or now - p.last >= SETTLE_S or len(self._pending) > PENDING_MAX]
        if not due:
            return []
        items = [self._pending.pop(key) for key in sorted(due, key=lambda k: self._pending[k].first)]
        requests = self._requests(min(p.first for p in items) - JOIN_BEFORE_S)
        serving = presence.serving(self.history_dir)
        said = (kubelet_log.removals(kubelet_log_path, min(p.first for p in items) - JOIN_BEFORE_S)
                if serving is None and kubelet_log_path else {})
        written: list[Deletion] = []
        for p in items:
            logged = said.get(p.image_id)
            line = (logged[1] if logged is not None and p.first - JOIN_BEFORE_S <= logged[0] <= p.last + JOIN_AFTER_S
                    else None)
            verdict = attribute(p.image_id, p.refs, p.first, p.last,
                                requests, serving.pid if serving is not None and p.live else None,
                                line, kubelet_log_path or "")
            evidence = verdict.evidence
            if not p.live and verdict.client == "":
                evidence = ("it went while the watcher was not following the runtime (found missing by its next "
                            "full listing), and cri-proxy saw no RemoveImage for it meanwhile.")
            deletion = Deletion(
                time=p.first, runtime=p.runtime, namespace=p.shown, refs=tuple(sorted(p.refs)),
                image_id=p.image_id, size=p.size,
                image_gone=not still_there(p.namespace, p.image_id, p.digest),
                wanted=wanted_reasons(policy, p.refs, p.image_id, p.flags, p.archives),
                pinned=pinned_reasons(p.flags, p.config, p.cri_pinned),
                deleter=verdict.deleter, client=verdict.client, evidence=evidence)
            self.write(deletion)
            written.append(deletion)
            self.log("warning" if deletion.wanted else "info", "image deleted", refs=",".join(deletion.refs),
                     image=deletion.image_id or "-", deleter=deletion.deleter,
                     wanted=",".join(deletion.wanted) or "no", pinned=",".join(deletion.pinned) or "no",
                     untagged_only="yes" if not deletion.image_gone else "no")
            self.on_deleted(deletion)
        return written

    def write(self, entry: Entry) -> bool:
        """Append one entry; a journal that cannot be written is a warning once per cause."""
        try:
            self.journal.append(entry)
            return True
        except PinctlError as err:
            cause = str(err)
            if cause not in self._warned:
                self._warned.add(cause)
                self.log("warning", "cannot write the deletion journal", error=cause,
                         hint=getattr(err, "hint", "") or "")
            return False

    def _requests(self, since: float) -> list[RemoveRequest]:
        """cri-proxy's RemoveImage entries at or after since, from the journal's last REQUESTS_TAIL
        bytes (and the rotated file's, in case it just rotated): a flush costs the same with a
        journal of a few lines or of its full size, since the window is a minute."""
        found: list[RemoveRequest] = []
        for name in (CURRENT, rotated(1)):
            try:
                with open(self.journal.path(name), "rb") as stream:
                    size = os.fstat(stream.fileno()).st_size
                    stream.seek(max(0, size - REQUESTS_TAIL))
                    tail = stream.read(REQUESTS_TAIL)
            except OSError:
                continue
            # Only the lines of requests are cut out and decoded: most of the tail is the watcher's own entries.
            at = tail.find(REQUEST_MARK)
            while at >= 0:
                start = tail.rfind(b"\n", 0, at) + 1
                end = tail.find(b"\n", at)
                raw = tail[start:] if end < 0 else tail[start:end]
                at = -1 if end < 0 else tail.find(REQUEST_MARK, end)
                if start == 0 and size > REQUESTS_TAIL:
                    continue  # the first line read may be the end of one cut by the seek
                try:
                    entry = decode(raw.decode("utf-8"))
                except (ValueError, UnicodeDecodeError):
                    continue  # corrupt, cut short, or newer: pinctl history reports those; none stops the watcher
                if isinstance(entry, RemoveRequest) and entry.time >= since:
                    found.append(entry)
            if size >= REQUESTS_TAIL:
                break  # the current file alone holds the tail: the rotated one is older still
        return found

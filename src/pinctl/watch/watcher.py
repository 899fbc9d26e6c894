"""sync --watch: keep the policy's pins true while containerd runs, restarts and changes.

A full sync at start and after every reconnect catches up on whatever happened unseen; in
between, every image create or update event is synced on its own, within the second. The
watcher's own label writes come back as update events and are then no-ops, so it never loops.

A namespace that does not exist yet (a fresh node: containerd creates k8s.io with its first
image) is synced as empty, and its first image arrives as an event like any other. The config is
read again on SIGHUP and when its files change (configfiles.ConfigPoll); both ask for the same
reload.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Optional, Sequence

from pinctl.backends import ImageEvent
from pinctl.journal import DEFAULT_DIR as HISTORY_DIR
from pinctl.journal import RESTORE_DONE, RESTORE_FAILED, RESTORE_SKIPPED, Deletion, Restore
from pinctl.errors import EngineUnreachable, PinctlError
from pinctl.fleet import events as node_events
from pinctl.imports.watching import DirsSync, is_failure, item_fields
from pinctl.model import (
    ACTION_CHANGED_UNDER_US,
    ACTION_PINNED,
    ACTION_PRUNED,
    MANAGED_LABEL,
    MANAGED_VALUE,
    Action,
    ItemResult,
    LogFn,
)
from pinctl.node import crio as crio_node
from pinctl.pins import labels as pin_labels
from pinctl.pins import plans as pinning
from pinctl.service.configfiles import ConfigPoll
from pinctl.watch import restore as restoring
from pinctl.watch import tracking
from pinctl.watch.deletions import DeletionRecorder
from pinctl.watch.health import SYNC_ENGINE, SYNC_STREAM_ENDED, SYNC_UNREACHABLE, SyncError, WatchState
from pinctl.watch.index import ImageIndex
from pinctl.watch.restore import Restorer
from pinctl.service.memory import serve_for_long

if TYPE_CHECKING:
    from pinctl.backends import ImageEventStream, ImageStore
    from pinctl.backends.cri import CriRuntime, RuntimeVersion
    from pinctl.model import StoredImage
    from pinctl.gc.kubelet import SourcedGcSettings
    from pinctl.node.crio import CrioNode
    from pinctl.node.sources import DockerSource, Followed, Node
    from pinctl.pins.policy import Policy

CHANGING_TOPICS = ("/images/create", "/images/update")
DELETE_TOPIC = "/images/delete"
# The actions the watcher itself makes, counted and logged as changes.
CHANGES: tuple[Action, ...] = (ACTION_PINNED, ACTION_PRUNED)
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 10.0
# Events are handled in batches: whatever arrived while the last batch was written, at most this many.
BATCH_MAX = 512
# Signals cancel the stream, which wakes the loop at once; this timeout is only a safety net.
POLL_SECONDS = 5.0
# CRI-O has no events: how often its images are read again between changes to its files.
CRIO_RESYNC_SECONDS = 60.0
# CRI-O has no image events either: its CRI's image list is read this often and compared with the
# last, so a deletion is recorded within this bound (one ListImages: 0.12 s at 10,000 images, about
# 1% of a core). An image pulled and deleted between two reads is never seen.
CRIO_DELETIONS_SECONDS = 10.0
# An event and the position of the followed source (in Node.followed()) it came from.
SourcedEvent = tuple[int, ImageEvent]


@dataclass
class WatchSetup:
    """What a (re)load of the configuration gives the watcher: a way to open the node (every
    session opens it afresh and closes it after, so a reload leaves no connection behind)."""

    open_node: Callable[[], Node]
    policy: Policy
    address: str
    # What the periodic check of --metrics-address reads besides the node (health.CheckSources).
    open_runtime: Callable[[], tuple[CriRuntime, RuntimeVersion]]
    gc_settings: Callable[[], SourcedGcSettings]
    # The paths whose change asks for a reload (configfiles.watched_paths); none: SIGHUP only.
    config_paths: Sequence[str] = ()
    # import_dirs: their archives imported and pinned at each full sync; None without import_dirs.
    imports: Optional[DirsSync] = None
    # The policy file's content hash (fleet.condition.revision_of), for --node-status.
    revision: str = ""
    # Where every image deletion is recorded (pinctl.journal): the setting history_dir.
    history_dir: str = HISTORY_DIR
    # The disk budget (percent of the image filesystem) a wanted image pulled back must fit in.
    max_usage: float = 80.0
    # The kubelet's log file (setting kubelet_log): its GC's deletions named there when no cri-proxy serves.
    kubelet_log: Optional[str] = None


class Watcher:
    def __init__(self, load: Callable[[], WatchSetup], log: LogFn, prune: bool) -> None:
        self.load = load
        self.log = log
        self.prune = prune
        self.settings = load()
        # Counted inline whether or not anything serves them: a dict increment per result.
        self.state = WatchState(self.settings.address)
        # What each reference is, so that a deletion event (which names the reference alone) can
        # be recorded with its image, size and pins; and the recorder that writes the journal.
        self.index = ImageIndex()
        self.recorder = DeletionRecorder(self.settings.history_dir, log, self._deleted)
        # Told every deletion recorded, after the metric counted it (restore, the Node's Events).
        self.on_deleted: Callable[[Deletion], None] = lambda _deletion: None
        self._crio_listed_at: Optional[float] = None  # when CRI-O's image list was last read
        # References the watcher itself just labelled: their write was guarded to the record as
        # read, so the update event it causes moves no target, and needs no read to keep the index.
        self._own_writes: set[tuple[str, str]] = set()
        # Records of event batches whose new targets (image ID, size) are not resolved yet.
        self._unresolved: list[tuple[ImageStore, str, Sequence[StoredImage]]] = []
        # Wanted images deleted anyway: restored (watch.restore), imports at the next full sync,
        # pulls one at a time by a thread of their own.
        self.restorer = Restorer()
        self._import_restores: list[restoring.Job] = []
        self._import_failures: dict[str, str] = {}
        self._pulls: queue.Queue[restoring.Job] = queue.Queue()
        self._puller: Optional[threading.Thread] = None
        # --node-status: an Event (a wanted image deleted, restored) for the Node; dropped without.
        self.on_node_event: Callable[[node_events.NodeEvent], None] = lambda _event: None
        self._stop = threading.Event()
        self._reload = threading.Event()
        # An import directory changed: the session ends and the next one syncs in full, imports first.
        self._resync = threading.Event()
        self._poll: Optional[ConfigPoll] = None
        # Set with either of them: ends a back-off early, so a reload asked for while containerd
        # is away is done (and reported) at once, not after the back-off.
        self._wake = threading.Event()
        self._streams: list[ImageEventStream] = []
        self._delay = BACKOFF_FIRST
        # One full read of the node at a time: a full sync and a round of the periodic check
        # (health.Checker, which takes this lock too) each hold every record of the node, and
        # the records of the listing, the CRI's answer and the GC model besides; at the same
        # time, as at start, their peaks added up (143 MiB at 10,000 images). Events are not
        # held up: they queue meanwhile, and a full sync waits one check round at most.
        self.reading = threading.Lock()

    # -- signals ----------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.stop())
        signal.signal(signal.SIGINT, lambda *_: self.stop())
        signal.signal(signal.SIGHUP, lambda *_: self.request_reload())

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._interrupt()

    def request_reload(self) -> None:
        """Read the config again: on SIGHUP, and when its files change."""
        self._reload.set()
        self._wake.set()
        self._interrupt()

    def _config_changed(self, path: str) -> None:
        self.log("info", "config changed, reloading", path=path)
        self.request_reload()

    def _archives_changed(self, path: str) -> None:
        self.log("info", "import directory changed, syncing", path=path)
        self._resync.set()
        self._wake.set()
        self._interrupt()

    def _import_paths(self) -> Sequence[str]:
        imports = self.settings.imports
        return imports.paths() if imports is not None else ()

    def _interrupt(self) -> None:
        """Cancel the event streams, on a thread of its own: SIGTERM and SIGHUP run their handler
        on the main thread between two bytecodes, perhaps while it holds a lock of gRPC's channel
        that cancel() takes too, and the stop then never came (seen in a benchmark)."""
        streams = list(self._streams)
        if streams:
            threading.Thread(target=_cancel_all, args=(streams,), name="pinctl-interrupt", daemon=True).start()

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        serve_for_long()  # every full sync and check round reads all records again: see service/memory.py
        self.log("info", "watching", address=self.settings.address, patterns=len(self.settings.policy.patterns))
        poll = self._poll = ConfigPoll(lambda: self.settings.config_paths, self._config_changed)
        archives = ConfigPoll(self._import_paths, self._archives_changed)
        poll.start()
        archives.start()
        try:
            while not self._stop.is_set():
                try:
                    self._reload_if_asked()
                    self._session()
                except PinctlError as err:
                    if self._stop.is_set():
                        break
                    if self._reload.is_set() or self._resync.is_set():
                        self.state.disconnected()
                        continue  # the stream was cut to reload or to import, not lost
                    self._back_off(err)
        finally:
            poll.stop()
            archives.stop()
        # Readiness is left as it was: the endpoint serves until the periodic check has stopped
        # (it may be mid-round), and a kubelet probing the terminating pod meanwhile would log
        # a failed probe for a stop it asked for itself.
        self.log("info", "stopped")
        return 0

    def _back_off(self, err: PinctlError) -> None:
        self.state.lost(err, _error_kind(err))
        what = "containerd unreachable" if isinstance(err, EngineUnreachable) else "cannot sync yet"
        self.log("warning", f"{what}, retrying", error=str(err), retry_in=f"{self._delay:g}s")
        self._wake.wait(self._delay)
        self._wake.clear()
        self.state.turned()
        self._delay = min(self._delay * 2, BACKOFF_MAX)

    def _session(self) -> None:
        """Subscribe first, then sync everything, then follow the events: nothing falls between.

        Every source with an event stream (pinctl's containerd, Docker's own) is followed; a
        reader thread per stream drains it into one queue, so a burst is handled in batches
        whose reads and writes overlap, instead of one round trip after another.
        """
        node = self.settings.open_node()
        crio = node.crio()
        if crio is not None:
            try:
                self._crio_session(crio)
            finally:
                node.close()
            return
        events: queue.Queue[Optional[SourcedEvent] | PinctlError] = queue.Queue()
        try:
            followed = node.followed()
            self._streams = [item.store.subscribe_images() for item in followed]
            for index, stream in enumerate(self._streams):
                threading.Thread(target=_read_into, args=(index, stream, events), daemon=True).start()
            # Docker's classic store: its own events, after the containerd streams in the queue's numbering.
            docker = tracking.docker_classic(node)
            if docker is not None:
                docker_events = tracking.DockerTopics(docker.view.engine.subscribe_images())
                self._streams.append(docker_events)
                threading.Thread(target=_read_into, args=(len(followed), docker_events, events), daemon=True).start()
            self._resync.clear()  # a change from here on ends this session and is synced by the next
            # Restores asked for until now are done by this full sync's import; later ones by the next.
            restores, self._import_restores = self._import_restores, []
            try:
                with self.reading:
                    self._full_sync(node)
                    if docker is not None:
                        self._index_docker(docker)
            except BaseException:
                self._import_restores[:0] = restores  # not done: the next session's full sync does them
                raise
            self._finish_import_restores(restores)
            self._delay = BACKOFF_FIRST  # connected and caught up: the next loss starts afresh
            while not (self._stop.is_set() or self._reload.is_set() or self._resync.is_set()):
                due = self.recorder.seconds_to_due()
                batch = _next_batch(events, POLL_SECONDS if due is None else min(POLL_SECONDS, due + 0.05))
                self.state.turned()
                self.state.events += len(batch)
                mine = [e for e in batch if e[0] < len(followed) and followed[e[0]].watches(e[1][0])]
                self._sync_batch(followed, [e for e in mine if e[1][1] in CHANGING_TOPICS])
                deletions = [e for e in mine if e[1][1] == DELETE_TOPIC]
                if deletions or events.empty():  # image IDs known before a deletion needs them
                    self._resolve_new_targets()
                self._record_deletions(deletions)
                if docker is not None:
                    self._record_docker(docker, [e[1][2] for e in batch if e[0] == len(followed)])
        finally:
            for stream in self._streams:
                stream.cancel()
            self._streams = []
            node.close()
            self._flush_deletions(force=True)  # nothing seen is left unwritten at a stop or a loss

    def _crio_session(self, crio: CrioNode) -> None:
        """CRI-O sends no image events and keeps its pins in files: pinctl's drop-in is synced at
        start, whenever one of CRI-O's files changes (another drop-in, the site's edit: carried
        over at once), and every CRIO_RESYNC_SECONDS (an image-ID pattern names images that came
        since). Its own write shows as a change too, and the sync after it changes nothing."""
        files = ConfigPoll(lambda: crio_node.watched_paths(crio), self._crio_files_changed)
        files.start()
        try:
            while not (self._stop.is_set() or self._reload.is_set() or self._resync.is_set()):
                with self.reading:
                    done = crio_node.sync(crio, self.settings.policy, self.prune, dry_run=False)
                self._report(done.results)
                for note in done.warnings:
                    self.log("warning", note)
                self.state.synced([])
                self._delay = BACKOFF_FIRST
                self._crio_deletions(crio)  # before the log line: from "full sync" on, a deletion is seen
                changed = sum(r.action in CHANGES for r in done.results)
                self.log("info", "full sync", runtime=crio.describe(), changed=changed, covered=len(done.results))
                resync_at = time.monotonic() + CRIO_RESYNC_SECONDS
                while time.monotonic() < resync_at:
                    due = self.recorder.seconds_to_due()
                    wait = min(CRIO_DELETIONS_SECONDS, max(0.0, resync_at - time.monotonic()))
                    if self._wake.wait(wait if due is None else min(wait, due + 0.05)):
                        break  # a file changed, a reload, a stop: sync (or leave) now
                    self.state.turned()
                    self._crio_deletions(crio)
                self._wake.clear()
                self.state.turned()
        finally:
            files.stop()
            self._flush_deletions(force=True)

    def _crio_deletions(self, crio: CrioNode) -> None:
        """CRI-O's list against the last one: each reference missing went since that read."""
        now = time.time()
        missing = tracking.index_crio(self.index, crio.images())
        for item in missing:
            self.recorder.gone(tracking.RUNTIME_CRIO, item, since=self._crio_listed_at, namespace="")
        self._crio_listed_at = now
        self._flush_deletions()

    def _crio_files_changed(self, path: str) -> None:
        self.log("info", "CRI-O's configuration changed, syncing pinctl's drop-in", path=path)
        self._wake.set()

    def _reload_if_asked(self) -> None:
        if not self._reload.is_set():
            return
        self._reload.clear()
        self._wake.clear()
        if self._poll is not None:
            self._poll.rebase()  # the files as read now: SIGHUP after an edit reloads once, not twice
        try:
            self.settings = self.load()
        except PinctlError as err:
            self.state.reloaded(ok=False, error=str(err))
            self.log("error", "config reload failed, keeping the previous one", error=str(err))
            return
        self.state.reloaded(ok=True)
        self.log("info", "config reloaded", patterns=len(self.settings.policy.patterns))

    def _full_sync(self, node: Node) -> None:
        if self.settings.imports is not None:
            self._import(node, self.settings.imports)
        views = node.views()
        plan = pinning.make_sync_plan(views, self.settings.policy, self.prune)
        results = pinning.apply_plan(plan, dry_run=False)
        self._report(results)
        self._index_views(views)
        self.state.synced([view.namespace for view in views])
        changed = sum(r.action in CHANGES for r in results)
        namespaces = ",".join(dict.fromkeys(view.namespace for view in views)) or "-"
        # Synced as empty; their first image comes as an event (a fresh node, a fresh root).
        absent = {"not_created_yet": ",".join(node.absent_namespaces())} if node.absent_namespaces() else {}
        self.log("info", "full sync", namespaces=namespaces, changed=changed, covered=len(results), **absent)

    def _import(self, node: Node, imports: DirsSync) -> None:
        """The directories' archives first, as sync does: the policy's sync then sees their images."""
        report = imports(node)
        self._import_failures = {item.archive: item.why or "failed" for item in report.imports if is_failure(item)}
        for item in report.imports:
            if is_failure(item):
                self.log("error", "import failed", **item_fields(item))
            elif item.action != "present" or item.pin == "pinned":
                self.log("info", f"import {item.action}", **item_fields(item))
        self._report(report.results)
        for note in report.notes:
            self.log("warning", note)

    def _sync_batch(self, followed: list[Followed], batch: list[SourcedEvent]) -> None:
        latest: dict[tuple[int, str], dict[str, dict[str, str]]] = {}
        for index, (namespace, _, name, labels) in batch:
            latest.setdefault((index, namespace), {})[name] = labels  # the latest event of a name wins
        for (index, namespace), by_name in latest.items():
            store = followed[index].store
            # Every record is read, to keep the index's target and pins current (a tag pulled again,
            # a name imported again with other content: both come as updates), except those of the
            # watcher's own label writes; only those that may need a change are planned.
            names = {n for n, labels in by_name.items() if self._may_need_change(n, labels)}
            own = {n for n, labels in by_name.items() if n not in names and (namespace, n) in self._own_writes
                   and self.index.relabel(namespace, n, labels)}
            self._own_writes.difference_update((namespace, n) for n in own)
            wanted = [n for n in by_name if n not in own]
            read = store.get_images(namespace, wanted) if wanted else []
            records = [record for record in read if record.name in names]
            if records:  # pins first: indexing a new image reads its manifest, which the pin need not wait for
                plan = pinning.make_batch_sync_plan(store, namespace, records, self.settings.policy, self.prune)
                self._report(pinning.apply_plan(plan, dry_run=False))
            tracking.note_records(self.index, namespace, read)
            self._unresolved.append((store, namespace, read))

    def _resolve_new_targets(self) -> None:
        pending, self._unresolved = self._unresolved, []
        for store, namespace, records in pending:
            tracking.resolve(self.index, store, namespace, records)

    # -- deletions ----------------------------------------------------------------------------

    def _index_views(self, views: Sequence[pinning.NamespaceView]) -> None:
        """Know every reference as the full sync found it; one the index held and the listing
        lacks went while the watcher was not following (before a reconnect): recorded too."""
        since = self.state.last_full_sync
        for view in views:
            try:
                missing = tracking.index_view(self.index, view)
            except PinctlError as err:
                self.log("warning", "cannot index images for the deletion journal", namespace=view.namespace,
                         error=str(err))
                continue
            for item in missing:
                self.recorder.gone(tracking.runtime_of(view.namespace), item, live=False, since=since)
        self._flush_deletions(force=True)

    def _index_docker(self, docker: DockerSource) -> None:
        try:
            missing = tracking.index_docker(self.index, docker)
        except PinctlError as err:
            self.log("warning", "cannot index Docker's images for the deletion journal", error=str(err))
            return
        for item in missing:
            self.recorder.gone(tracking.RUNTIME_DOCKER, item, live=False, since=self.state.last_full_sync,
                               namespace="")
        self._flush_deletions(force=True)

    def _record_docker(self, docker: DockerSource, image_ids: list[str]) -> None:
        for image_id in dict.fromkeys(image_ids):
            for item in tracking.docker_changed(self.index, docker, image_id):
                self.recorder.gone(tracking.RUNTIME_DOCKER, item, namespace="")
        self._flush_deletions()

    def _record_deletions(self, batch: list[SourcedEvent]) -> None:
        for _index, (namespace, _topic, name, _labels) in batch:
            item = self.index.take(namespace, name)
            if item is None:
                self.log("info", "image deleted before the watcher knew it", namespace=namespace, ref=name)
                continue
            self.recorder.gone(tracking.runtime_of(namespace), item)
        self._flush_deletions()

    def _flush_deletions(self, force: bool = False) -> None:
        if self.recorder.pending():
            self.recorder.retarget(self.settings.history_dir)
            self.recorder.flush(self.settings.policy, self.index.holds_image, force=force,
                                kubelet_log_path=self.settings.kubelet_log)

    def _deleted(self, deletion: Deletion) -> None:
        self.state.deleted(deletion.wanted, deletion.pinned, deletion.deleter)
        if deletion.wanted:
            self.on_node_event(node_events.deletion_event(deletion.refs, deletion.image_id, deletion.deleter,
                                                          deletion.client))
        self.on_deleted(deletion)
        self._restore(deletion)

    # -- restore ------------------------------------------------------------------------------

    def _restore(self, deletion: Deletion) -> None:
        job, entry = self.restorer.decide(deletion, self.settings.policy)
        if entry is not None:
            self._restore_done(entry)
        if job is None:
            return
        self.restorer.attempted(job)
        if job.how == restoring.HOW_PULL:
            self._pulls.put(job)
            if self._puller is None:
                self._puller = threading.Thread(target=self._pull_loop, name="pinctl-restore", daemon=True)
                self._puller.start()
        elif self.settings.imports is None:
            self._restore_done(Restore(time.time(), job.refs, RESTORE_FAILED, "import", deletion.image_id,
                                       "import_dirs is no longer set", deletion.namespace, deletion.runtime))
        else:
            self.log("info", "restoring: a full sync imports import_dirs again", refs=",".join(job.refs))
            self._import_restores.append(job)
            self._resync.set()
            self._wake.set()
            self._interrupt()

    def _finish_import_restores(self, jobs: list[restoring.Job]) -> None:
        for job in jobs:
            deletion = job.deletion
            namespace = deletion.namespace or (tracking.DOCKER_CLASSIC if deletion.runtime == tracking.RUNTIME_DOCKER
                                               else tracking.CRIO)
            held = self.index.refs(namespace)
            self._restore_done(restoring.import_outcome(job, held.__contains__, self._import_failures))

    def _pull_loop(self) -> None:
        """Runs in a thread of its own from the first pull on, until the watcher stops."""
        while not self._stop.is_set():
            try:
                job = self._pulls.get(timeout=POLL_SECONDS)
            except queue.Empty:
                continue
            s = self.settings
            self.log("info", "restoring: pulling again", refs=",".join(job.refs))
            self._restore_done(restoring.pull_back(job, s.open_node, s.open_runtime, s.max_usage, self._stop))

    def _restore_done(self, entry: Restore) -> None:
        self.recorder.write(entry)
        level = "info" if entry.outcome == RESTORE_DONE else "warning"
        self.log(level, f"restore {entry.outcome}", refs=",".join(entry.refs), how=entry.how or "-",
                 detail=entry.detail or "-")
        if entry.outcome != RESTORE_SKIPPED or entry.detail.startswith("deleted again"):
            self.on_node_event(node_events.restore_event(entry.refs, entry.outcome == RESTORE_DONE,
                                                         entry.how, entry.detail))

    def _may_need_change(self, name: str, labels: dict[str, str]) -> bool:
        """Decide from the event alone when possible: most events, the watcher's own writes among
        them, need no read at all."""
        s = self.settings
        if pinning.needs_image_ids(s.policy):
            return True
        wanted = bool(pinning.wanted_names(s.policy, [name]))
        if wanted:
            return not pin_labels.carries_pin(labels)
        return self.prune and labels.get(MANAGED_LABEL) == MANAGED_VALUE

    def _report(self, results: list[ItemResult]) -> None:
        self.state.counted(results)
        if len(self._own_writes) > BATCH_MAX * 8:
            self._own_writes.clear()  # marks whose events never came (a record deleted meanwhile)
        for r in results:
            if r.action in CHANGES:
                self._own_writes.add((r.namespace, r.ref))
                self.log("info", r.action, namespace=r.namespace, ref=r.ref)
            elif r.action == ACTION_CHANGED_UNDER_US:
                # Its own event follows; the next batch decides again from the record as it is.
                self.log("warning", r.action, namespace=r.namespace, ref=r.ref, detail=r.error or "")
            elif r.failed:
                self.log("error", "failed", namespace=r.namespace, ref=r.ref, error=r.error or "")


def warn_once(log: LogFn) -> Callable[[str], None]:
    """What opening the node notices, logged as a warning the first time only: the watcher opens
    the node again at every sync and check, and a fleet's one policy can name what a runtime
    ignores (namespaces on CRI-O), which is worth a line, not one a minute."""
    noticed: set[str] = set()

    def warn(note: str) -> None:
        if note not in noticed:
            noticed.add(note)
            log("warning", note)

    return warn


def _error_kind(err: PinctlError) -> SyncError:
    if isinstance(err, _StreamEnded):
        return SYNC_STREAM_ENDED
    return SYNC_UNREACHABLE if isinstance(err, EngineUnreachable) else SYNC_ENGINE


def _cancel_all(streams: Sequence[ImageEventStream]) -> None:
    for stream in streams:
        stream.cancel()


def _read_into(index: int, stream: Iterable[ImageEvent], events: queue.Queue[Optional[SourcedEvent] | PinctlError]) -> None:
    """Runs in a thread: every event, then None when the stream ends, or the error that ended it."""
    try:
        for event in stream:
            events.put((index, event))
        events.put(None)
    except PinctlError as err:
        events.put(err)


def _next_batch(events: queue.Queue[Optional[SourcedEvent] | PinctlError],
                timeout: float = POLL_SECONDS) -> list[SourcedEvent]:
    """Wait briefly for one event, then take whatever else is already queued."""
    batch: list[SourcedEvent] = []
    try:
        item = events.get(timeout=timeout)
        while True:
            if isinstance(item, PinctlError):
                raise item
            if item is None:
                raise _StreamEnded()
            batch.append(item)
            if len(batch) >= BATCH_MAX:
                break
            item = events.get_nowait()
    except queue.Empty:
        pass
    return batch


class _StreamEnded(PinctlError):
    """containerd closed the event stream without an error: reconnect and catch up."""

    def __init__(self) -> None:
        super().__init__("the event stream ended")

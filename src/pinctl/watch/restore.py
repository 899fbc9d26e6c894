"""A wanted image deleted anyway comes back: imported again from its import_dirs archive (the
watcher's next full sync, asked for at once), or pulled again when an exact reference of the
policy names it, within the disk budget. Each attempt is a Restore entry in the journal.

Not restored:
- what the kubelet deleted (its GC, seen by cri-proxy or in its log): it freed that space on
  purpose, and pulling the image back would only fill the disk it just freed. The entry says so.
- an image deleted again within the back-off after pinctl restored it: whatever deletes it does so
  on purpose or in a loop, and restoring it again would race it. The back-off starts at
  BACKOFF_FIRST_S and doubles at each such deletion, up to BACKOFF_MAX_S; an image left alone
  for BACKOFF_MAX_S after its restore starts afresh.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from pinctl import refs as refnames
from pinctl.errors import PinctlError, UsageError
from pinctl.journal import (DELETER_KUBELET, DELETER_KUBELET_LOG, RESTORE_DONE, RESTORE_FAILED, RESTORE_SKIPPED,
                            Deletion, Restore)
from pinctl.model import CRI_NAMESPACE, DOCKER_NAMESPACE
from pinctl.backends import registry
from pinctl.pins.policy import Policy
from pinctl.pull import run as pulling
from pinctl.pull.targets import NodeLabels, choose_target

if TYPE_CHECKING:
    from pinctl.backends.cri import CriRuntime, RuntimeVersion
    from pinctl.node.sources import Node

BACKOFF_FIRST_S = 600.0
BACKOFF_MAX_S = 6 * 3600.0
REMEMBERED = 1024  # images whose last restore is remembered (the oldest forgotten first)
HOW_IMPORT = "import"
HOW_PULL = "pull"
PULL_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Job:
    """A restore to do: import (the archives' directories at the next full sync) or pull (refs)."""

    deletion: Deletion
    how: str
    refs: tuple[str, ...]  # the references to bring back
    archives: tuple[str, ...] = ()  # import: the directories named in Deletion.wanted


def exact_refs(policy: Policy, refs: Sequence[str]) -> tuple[str, ...]:
    """The deleted references an exact policy reference names: what sync --pull would pull."""
    exact = {}
    for pattern in policy.patterns:
        if pattern.kind == "exact" and not pattern.needle.startswith("sha256:"):
            try:
                exact[refnames.normalize(pattern.text)] = pattern.text
            except UsageError:
                continue
    found = []
    for ref in refs:
        try:
            if refnames.normalize(ref) in exact:
                found.append(ref)
        except UsageError:
            continue
    return tuple(found)


def _key(deletion: Deletion) -> str:
    return deletion.image_id or ",".join(deletion.refs)


class Restorer:
    """Decides, for each deletion recorded, whether and how to restore it; remembers its restores."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._restored: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key: (when, back-off)

    def decide(self, deletion: Deletion, policy: Policy) -> tuple[Optional[Job], Optional[Restore]]:
        """(a job to do, None), or (None, a skipped entry saying why), or (None, None) for an
        image pinctl did not want kept."""
        if not deletion.wanted:
            return None, None
        refs = tuple(ref for ref in deletion.refs if not ref.startswith("sha256:")) or deletion.refs
        if deletion.deleter in (DELETER_KUBELET, DELETER_KUBELET_LOG):
            return None, self._skipped(deletion, "the kubelet deleted it to free space; pulling or importing it "
                                                 "back would undo that (pin it, or run cri-proxy to refuse it)")
        now = self.clock()
        key = _key(deletion)
        last = self._restored.get(key)
        if last is not None and now - last[0] < last[1]:
            backoff = min(last[1] * 2, BACKOFF_MAX_S)
            self._restored[key] = (last[0], backoff)
            return None, self._skipped(deletion, f"deleted again {now - last[0]:.0f} s after pinctl restored it: not "
                                                 f"restored again for {last[1]:.0f} s (the back-off doubles each time, "
                                                 f"up to {BACKOFF_MAX_S:.0f} s)")
        archives = tuple(w.split(" ", 1)[1] for w in deletion.wanted if w.startswith("import_dirs "))
        if archives:
            return Job(deletion, HOW_IMPORT, refs, archives), None
        pulled = exact_refs(policy, refs)
        if pulled:
            return Job(deletion, HOW_PULL, pulled), None
        if not deletion.image_gone:
            return None, self._skipped(deletion, "only its names went: the image stays under its ID, unpinned, and no "
                                                 "exact reference of the policy names it; tag it again (ctr images "
                                                 "tag) and sync pins it")
        return None, self._skipped(deletion, "nothing gives it back: no import_dirs archive holds it, and no exact "
                                             "reference of the policy names it (a glob or a hand pin names no one "
                                             "image to pull)")

    def attempted(self, job: Job) -> None:
        """A restore was tried: a deletion of the image within the back-off is not restored again."""
        key = _key(job.deletion)
        now = self.clock()
        last = self._restored.pop(key, None)
        backoff = last[1] if last is not None and now - last[0] < BACKOFF_MAX_S else BACKOFF_FIRST_S
        self._restored[key] = (now, backoff)
        while len(self._restored) > REMEMBERED:
            self._restored.popitem(last=False)

    @staticmethod
    def _skipped(deletion: Deletion, why: str) -> Restore:
        return Restore(time.time(), deletion.refs, RESTORE_SKIPPED, image_id=deletion.image_id, detail=why,
                       namespace=deletion.namespace, runtime=deletion.runtime)


def import_outcome(job: Job, present: Callable[[str], bool], failures: dict[str, str]) -> Restore:
    """After the full sync that imported import_dirs again: is every reference back?"""
    deletion = job.deletion
    missing = [ref for ref in job.refs if not present(ref)]
    how = f"import from {', '.join(job.archives)}"
    if not missing:
        return Restore(time.time(), job.refs, RESTORE_DONE, how, deletion.image_id,
                       namespace=deletion.namespace, runtime=deletion.runtime)
    why = "; ".join(f"{path}: {text}" for path, text in failures.items() if any(path.startswith(d) for d in job.archives))
    detail = why or (f"{', '.join(missing)} not back after the full sync imported {', '.join(job.archives)} "
                     "(an archive already imported for another of its references is not imported again)")
    return Restore(time.time(), job.refs, RESTORE_FAILED, how, deletion.image_id, detail,
                   deletion.namespace, deletion.runtime)


def pull_back(job: Job, open_node: Callable[[], Node], open_runtime: Callable[[], tuple[CriRuntime, RuntimeVersion]],
              max_usage: float, cancelled: threading.Event) -> Restore:
    """Pull the references again through the runtime that lost them, within the disk budget."""
    deletion = job.deletion
    namespaces = (DOCKER_NAMESPACE,) if deletion.runtime == "docker" else (
        (CRI_NAMESPACE,) if deletion.runtime == "containerd" else ())
    try:
        node = open_node()
    except PinctlError as err:
        return Restore(time.time(), job.refs, RESTORE_FAILED, HOW_PULL, deletion.image_id, str(err),
                       deletion.namespace, deletion.runtime)
    try:
        target = choose_target(node, namespaces, open_runtime)
        request = pulling.PullRequest(job.refs, pin=False, timeout=PULL_TIMEOUT_S, max_usage=max_usage,
                                      namespaces=namespaces)
        run = pulling.PullRun(target, NodeLabels(node), request, pulling.Budget(target, max_usage), {},
                              registry.compressed_size, lambda _ref, _state: None, cancelled)
        items, _interrupted = pulling.run(run, job.refs, lambda _item: None)
    except PinctlError as err:
        return Restore(time.time(), job.refs, RESTORE_FAILED, HOW_PULL, deletion.image_id, str(err),
                       deletion.namespace, deletion.runtime)
    finally:
        node.close()
    skipped = [i for i in items if i.action == pulling.SKIPPED]
    failed = [i for i in items if i.action == pulling.FAILED]
    if failed:
        outcome, detail = RESTORE_FAILED, "; ".join(f"{i.ref}: {i.why}" for i in failed)
    elif skipped:
        outcome, detail = RESTORE_SKIPPED, "; ".join(f"{i.ref}: {i.why}" for i in skipped)
    else:
        outcome, detail = RESTORE_DONE, ""
    return Restore(time.time(), job.refs, outcome, HOW_PULL, deletion.image_id, detail, deletion.namespace,
                   deletion.runtime)

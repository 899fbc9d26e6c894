"""Guarding label writes against records that changed after they were planned. No I/O here.

containerd's image API has no conditional update, so a backend reads each record just before
writing (precheck), writes with a field mask, and compares the record the write returns with
the plan (landed_elsewhere). A write that reached another image is undone (undo) and the
reference reported as changed under us: a label must never stay on an image nobody planned.
"""

from __future__ import annotations

from typing import Optional

from pinctl import refs
from pinctl.model import (
    MANAGED_LABEL,
    PIN_LABEL,
    VERDICT_ALREADY,
    VERDICT_FAILED,
    VERDICT_MOVED,
    VERDICT_WRITTEN,
    LabelChange,
    StoredImage,
    WriteOutcome,
)

# The labels a plan is decided from: if someone else changed them since, the plan is stale.
GUARDED = (PIN_LABEL, MANAGED_LABEL)

WRITTEN = WriteOutcome(VERDICT_WRITTEN)
ALREADY = WriteOutcome(VERDICT_ALREADY)
# A SIGINT came before this write was sent (pinctl.backends.sigint_deferred).
INTERRUPTED = WriteOutcome(VERDICT_FAILED, "not tried: interrupted (SIGINT) before its write; nothing written",
                           interrupted=True)


def moved(detail: str) -> WriteOutcome:
    return WriteOutcome(VERDICT_MOVED, detail)


def failed(detail: str) -> WriteOutcome:
    return WriteOutcome(VERDICT_FAILED, detail)


def precheck(planned: StoredImage, current: Optional[StoredImage], change: LabelChange) -> Optional[WriteOutcome]:
    """None when the write may go ahead on current; otherwise what to report instead."""
    if current is None:
        return moved("the reference was removed after planning; nothing written")
    if current.target.digest != planned.target.digest:
        return moved(f"{_repointed(planned, current)} after planning; nothing written (run the command again)")
    changed = [key for key in GUARDED if current.labels.get(key) != planned.labels.get(key)]
    if applied(current.labels, change) and all(key in change for key in changed):
        return ALREADY
    if changed:
        return moved(f"someone else changed {', '.join(changed)} after planning; nothing written (run it again)")
    return None


def applied(labels: dict[str, str], change: LabelChange) -> bool:
    return all(labels.get(key) == value for key, value in change.items())


def landed_elsewhere(planned: StoredImage, after: StoredImage) -> bool:
    return after.target.digest != planned.target.digest


def undo(before: StoredImage, after: StoredImage, change: LabelChange) -> LabelChange:
    """The write that takes back a change which landed on a re-pointed record.

    When the record kept its other labels (a target-only update, as the CRI plugin's pull
    does), it also had ours as before: restore those values. When its labels were replaced
    (a full replace or a delete and create, as ctr pull does), it had none of what we set.
    """
    if _others(before.labels, change) == _others(after.labels, change):
        return {key: before.labels.get(key) for key in change}
    return {key: None for key, value in change.items() if value is not None}


def moved_after_write(planned: StoredImage, after: StoredImage, undo_error: Optional[str]) -> WriteOutcome:
    what = f"{_repointed(planned, after)} while pinctl wrote"
    if undo_error is None:
        return moved(f"{what}; the label change was undone")
    return moved(f"{what}; undoing the label change failed ({undo_error}): check it with pinctl ls")


def _others(labels: dict[str, str], change: LabelChange) -> dict[str, str]:
    return {key: value for key, value in labels.items() if key not in change}


def _repointed(planned: StoredImage, current: StoredImage) -> str:
    return (f"re-pointed from {refs.short_digest(planned.target.digest)} "
            f"to {refs.short_digest(current.target.digest)}")

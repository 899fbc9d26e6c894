"""The guard around label writes: what counts as changed after planning, and how a write is undone."""

from __future__ import annotations

import signal
from typing import Optional

from pinctl.backends import guard as writes
from pinctl.backends import sigint_deferred
from pinctl.model import MANAGED_LABEL, PIN_LABEL, Descriptor, LabelChange, StoredImage

PIN: LabelChange = {PIN_LABEL: "pinned"}
UNPIN: LabelChange = {PIN_LABEL: None, MANAGED_LABEL: None}


def record(target: str, **labels: str) -> StoredImage:
    return StoredImage("example.test/app:1", dict(labels), Descriptor("m", f"sha256:{target * 64}", 1))


def pinned(target: str, managed: bool = False) -> StoredImage:
    labels = {PIN_LABEL: "pinned", **({MANAGED_LABEL: "true"} if managed else {})}
    return StoredImage("example.test/app:1", labels, Descriptor("m", f"sha256:{target * 64}", 1))


def verdict(planned: StoredImage, current: Optional[StoredImage], change: LabelChange) -> Optional[str]:
    outcome = writes.precheck(planned, current, change)
    return None if outcome is None else outcome.verdict


def test_precheck_lets_an_unchanged_record_through() -> None:
    assert verdict(record("a"), record("a", other="x"), PIN) is None


def test_precheck_stops_a_removed_or_repointed_record() -> None:
    assert verdict(record("a"), None, PIN) == "moved"
    outcome = writes.precheck(record("a"), record("b"), PIN)
    assert outcome is not None and outcome.verdict == "moved"
    assert "re-pointed from sha256:aaaaaaaaaaaa to sha256:bbbbbbbbbbbb" in (outcome.detail or "")


def test_precheck_sees_a_change_already_made() -> None:
    assert verdict(record("a"), pinned("a"), PIN) == "already"
    assert verdict(pinned("a"), record("a"), UNPIN) == "already"


def test_precheck_does_not_call_a_pin_sync_made_meanwhile_already_done() -> None:
    # The operator's pin must take sync's mark away; a pin sync wrote since is not theirs yet.
    assert verdict(record("a"), pinned("a", managed=True), PIN) == "moved"


def test_precheck_stops_when_someone_else_changed_the_pin_labels() -> None:
    # sync planned to prune its own pin; meanwhile an operator took the pin over by hand.
    outcome = writes.precheck(pinned("a", managed=True), pinned("a"), {PIN_LABEL: None, MANAGED_LABEL: None})
    assert outcome is not None and outcome.verdict == "moved" and MANAGED_LABEL in (outcome.detail or "")


def test_undo_restores_values_when_the_record_kept_its_labels() -> None:
    before = pinned("a", managed=False)
    before = StoredImage(before.name, {**before.labels, "team": "x"}, before.target)
    after = StoredImage(before.name, {"team": "x"}, record("b").target)  # our unpin landed on image b
    assert writes.undo(before, after, UNPIN) == {PIN_LABEL: "pinned", MANAGED_LABEL: None}


def test_undo_removes_what_was_set_when_the_labels_were_replaced() -> None:
    before = record("a", team="x")
    after = StoredImage(before.name, {PIN_LABEL: "pinned", "puller": "y"}, record("b").target)
    assert writes.undo(before, after, PIN) == {PIN_LABEL: None}
    # An unpin that reached a replaced record set nothing, so there is nothing to take back.
    assert writes.undo(pinned("a"), StoredImage(before.name, {"puller": "y"}, record("b").target), UNPIN) == {}


def test_landed_elsewhere_compares_targets() -> None:
    assert writes.landed_elsewhere(record("a"), record("b"))
    assert not writes.landed_elsewhere(record("a"), pinned("a"))


def test_a_sigint_while_writes_are_deferred_is_a_request_not_an_exception(sigint_at_a_shell: None) -> None:
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with sigint_deferred() as requested:
        assert not requested()
        signal.raise_signal(signal.SIGINT)  # would raise KeyboardInterrupt here otherwise
        assert requested()
        with sigint_deferred() as inner:  # the backend's own, inside apply_plan's: one flag
            assert inner()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_handler_of_someone_elses_is_left_alone() -> None:
    came: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: came.append(signum))
    try:
        with sigint_deferred() as requested:
            signal.raise_signal(signal.SIGINT)
            assert came and not requested()  # the service's handler (sync --watch) decides
    finally:
        signal.signal(signal.SIGINT, previous)

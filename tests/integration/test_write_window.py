"""Guarded label writes in a window (issue 32, item 5), on real containerd 1.7.

Each group's records are read again and its writes sent while the writes of the groups before
it are still on their way. A SIGINT (Ctrl-C) in the middle of a batch must leave nothing
half-applied unreported: every write sent is finished and reported, everything else is
reported as not tried and left unwritten. test_write_guard.py holds the guard's own races.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Optional, Sequence

import grpc
import pytest

from pinctl.backends import containerd as containerd_backend
from pinctl.backends.containerd import ContainerdStore
from pinctl.commands.pin import ChangeReport
from pinctl.errors import EXIT_INTERRUPTED
from pinctl.model import ACTION_ALREADY_PINNED, ACTION_FAILED, ACTION_PINNED, StoredImage
from pinctl.pins import plans as pinning
from pinctl.proto import images_pb2, images_pb2_grpc
from tests.harness import images
from tests.harness.containerd import ContainerdDaemon

PIN = "io.cri-containerd.pinned"
LoadImages = Callable[..., list[images.ImageInfo]]


class InterruptingStore(ContainerdStore):
    """The real store, with a SIGINT at a known point: once the re-check of group number `at`
    has been answered, before its writes are sent. The groups before it have writes in flight."""

    def __init__(self, daemon: ContainerdDaemon, at: int) -> None:
        super().__init__(daemon.address, 5.0)
        self.at = at
        self.rechecks = 0

    def _current_records(self, namespace: str, names: Sequence[str]) -> list[Optional[StoredImage] | Any]:
        found = super()._current_records(namespace, names)
        self.rechecks += 1
        if self.rechecks == self.at:
            signal.raise_signal(signal.SIGINT)
        return found


@pytest.fixture
def many_refs(
    containerd17: ContainerdDaemon, fresh_namespace: Callable[[ContainerdDaemon], str], load_images: LoadImages
) -> Iterator[tuple[ContainerdDaemon, str, images.ImageInfo, list[str]]]:
    ns = fresh_namespace(containerd17)
    (a,) = load_images(containerd17, [images.recipe("example.test/a:1", seed="window-a")], namespace=ns)
    refs = [f"example.test/many:{i:04d}" for i in range(1000)]
    for start in range(0, len(refs), 250):
        containerd17.ctr("images", "tag", "example.test/a:1", *refs[start : start + 250], namespace=ns)
    yield containerd17, ns, a, ["example.test/a:1", *refs]


def pinned_now(daemon: ContainerdDaemon, ns: str) -> set[str]:
    return {row.ref for row in daemon.images(ns) if row.labels.get(PIN) == "pinned"}


def test_every_item_is_reported_in_order_across_many_groups(many_refs: Any) -> None:
    daemon, ns, a, refs = many_refs
    store = ContainerdStore(daemon.address, 5.0)
    # A few already pinned, spread over the groups: their items say so and nothing is written.
    for ref in refs[5::97]:
        daemon.label_image(ref, {PIN: "pinned"}, namespace=ns)
    plan = pinning.make_plan([pinning.NamespaceView(store, ns)], "pin", refs)
    assert len(plan.changes) > 4 * containerd_backend.WRITE_GROUP * containerd_backend.WRITE_DEPTH
    results = pinning.apply_plan(plan, dry_run=False)
    assert [r.ref for r in results] == sorted(refs)
    by_ref = {r.ref: r.action for r in results}
    assert {by_ref[ref] for ref in refs[5::97]} == {ACTION_ALREADY_PINNED}
    assert {by_ref[ref] for ref in set(refs) - set(refs[5::97])} == {ACTION_PINNED}
    assert pinned_now(daemon, ns) == set(refs)


def test_a_sigint_mid_batch_finishes_what_was_sent_and_reports_the_rest(many_refs: Any, sigint_at_a_shell: None) -> None:
    daemon, ns, a, refs = many_refs
    group = containerd_backend.WRITE_GROUP
    at = containerd_backend.WRITE_DEPTH  # the groups before it have their writes on the way
    store = InterruptingStore(daemon, at)
    plan = pinning.make_plan([pinning.NamespaceView(store, ns)], "pin", refs)
    planned = [change.image.name for change in plan.changes]
    results = pinning.apply_plan(plan, dry_run=False)  # no KeyboardInterrupt: the SIGINT was a request
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert store.rechecks == at  # nothing was read after it
    by_ref = {r.ref: r for r in results}
    assert sorted(by_ref) == sorted(refs) and len(results) == len(refs)
    sent = set(planned[: (at - 1) * group])
    # Every write sent before the SIGINT was finished and is reported as what it did...
    assert {by_ref[ref].action for ref in sent} == {ACTION_PINNED}
    # ...and everything after it, the re-checked group included, was not written and says so.
    rest = set(refs) - sent
    assert all(by_ref[ref].action == ACTION_FAILED and by_ref[ref].interrupted for ref in rest)
    assert all("interrupted" in (by_ref[ref].error or "") for ref in rest)
    assert pinned_now(daemon, ns) == sent
    assert ChangeReport("pin", results, False).exit_code == EXIT_INTERRUPTED


def test_ctrl_c_on_the_command_leaves_no_write_unreported(many_refs: Any) -> None:
    """The command's own SIGINT, sent once its first label has landed. On a machine fast enough
    to finish first, the same checks hold: each reference is as its item says."""
    daemon, ns, a, refs = many_refs
    env = {**os.environ, "CONTAINERD_ADDRESS": daemon.address, "PINCTL_CONTAINERD_CONFIG": str(daemon.config_path)}
    argv = [sys.executable, "-m", "pinctl", "-n", ns, "pin", a.image_id, "-o", "json"]
    # A suite started in the background ignores SIGINT, and pinctl would inherit that (then the
    # command would finish and the checks below hold trivially): it gets the default, as at a shell.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    channel = grpc.insecure_channel(f"unix://{daemon.address}")
    stub = images_pb2_grpc.ImagesStub(channel)
    meta = (("containerd-namespace", ns),)
    try:
        while proc.poll() is None:
            labels = stub.Get(images_pb2.GetImageRequest(name=refs[0]), metadata=meta).image.labels
            if labels.get(PIN) == "pinned":
                proc.send_signal(signal.SIGINT)
                break
            time.sleep(0.001)
        out, err = proc.communicate(timeout=120)
    finally:
        channel.close()
    doc = json.loads(out)
    actions = {r["ref"]: r["action"] for r in doc["results"]}
    assert sorted(actions) == sorted(refs), err
    now = pinned_now(daemon, ns)
    assert {ref for ref, action in actions.items() if action == ACTION_PINNED} == now
    interrupted = [r for r in doc["results"] if r["action"] == ACTION_FAILED]
    assert all("interrupted" in r["error"] for r in interrupted), interrupted[:3]
    assert proc.returncode == (EXIT_INTERRUPTED if interrupted else 0), err


def test_one_polling_thread_serves_a_whole_batch(many_refs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """gRPC's Python channel answers futures from a polling thread that it starts whenever a call
    begins with none in flight. Between two groups of writes there were none, so a batch started
    one or two such threads per group, each start waiting to be scheduled on a busy node; the
    call set_labels keeps open for the batch leaves one thread serving every group."""
    daemon, ns, a, refs = many_refs
    started: list[threading.Thread] = []
    start = threading.Thread.start

    def counting(thread: threading.Thread) -> None:
        started.append(thread)
        start(thread)

    store = ContainerdStore(daemon.address, 5.0)
    plan = pinning.make_plan([pinning.NamespaceView(store, ns)], "pin", refs)
    groups = -(-len(plan.changes) // containerd_backend.WRITE_GROUP)
    assert groups > 8
    monkeypatch.setattr(threading.Thread, "start", counting)
    results = pinning.apply_plan(plan, dry_run=False)
    monkeypatch.undo()
    assert {r.action for r in results} == {ACTION_PINNED}
    assert pinned_now(daemon, ns) == set(refs)
    # The polling thread is the only thread a batch starts (pinctl's writes start none of their own).
    assert len(started) == 1, started

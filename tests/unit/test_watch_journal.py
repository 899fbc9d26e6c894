"""The deletion recording's pure parts: the index, coalescing, wanted and pinned, and the deleter
verdict joined to cri-proxy's RemoveRequest entries (written here by hand, with a presence mark).
The watcher against real runtimes: tests/integration/test_watch_history.py."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from pinctl.config.loader import PatternEntry
from pinctl.journal import (DELETER_CRI_CLIENT, DELETER_KUBELET, DELETER_OUTSIDE_CRI, DELETER_UNKNOWN,
                            REQUEST_FAILED, REQUEST_FORWARDED, REQUEST_REFUSED, Deletion, RemoveRequest, encode,
                            presence)
from pinctl.journal.attribution import JOIN_BEFORE_S, attribute, names_image
from pinctl.journal.store import Journal
from pinctl.model import MANAGED_LABEL, PIN_LABEL
from pinctl.pins.policy import compile_policy
from pinctl.watch import deletions
from pinctl.watch.deletions import DeletionRecorder, pinned_reasons, wanted_reasons
from pinctl.watch.index import FLAG_LABEL, FLAG_SYNC, ImageIndex

ID_A = "sha256:" + "a" * 64
ID_B = "sha256:" + "b" * 64
DIGEST_A = "sha256:" + "1" * 64
DIGEST_A2 = "sha256:" + "2" * 64
DIGEST_B = "sha256:" + "3" * 64


def policy(*texts: str) -> Any:
    return compile_policy([PatternEntry(text, "test", "pinctl") for text in texts])


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class Logged(list[tuple[str, str, dict[str, Any]]]):
    def __call__(self, level: str, msg: str, **fields: Any) -> None:
        self.append((level, msg, fields))


# -- the index ----------------------------------------------------------------------------------


def filled() -> ImageIndex:
    index = ImageIndex()
    index.replace("k8s.io", [
        ("example.test/a:1", DIGEST_A, {PIN_LABEL: "pinned", MANAGED_LABEL: "true"}),
        ("example.test/a:latest", DIGEST_A2, {}),  # the same image through an index manifest
        ("example.test/b:1", DIGEST_B, {PIN_LABEL: "pinned", "io.pinctl.archive": "/var/lib/images/b.tar"}),
    ], {"example.test/b:1": "/etc/containerd/config.toml:12"})
    index.resolved(DIGEST_A, ID_A, 1000)
    index.resolved(DIGEST_A2, ID_A, 1200)
    index.resolved(DIGEST_B, ID_B, 500)
    return index


def test_the_index_gives_what_a_reference_was_and_forgets_it() -> None:
    index = filled()
    gone = index.take("k8s.io", "example.test/a:1")
    assert gone is not None
    assert (gone.image_id, gone.size, gone.digest, gone.flags) == (ID_A, 1000, DIGEST_A, FLAG_LABEL | FLAG_SYNC)
    assert index.take("k8s.io", "example.test/a:1") is None
    assert index.take("moby", "example.test/b:1") is None
    # Another reference of the image (another target, the same ID) is still there: an untag.
    assert index.holds_image("k8s.io", ID_A, DIGEST_A)
    assert index.take("k8s.io", "example.test/a:latest") is not None
    assert not index.holds_image("k8s.io", ID_A, DIGEST_A)
    b = index.take("k8s.io", "example.test/b:1")
    assert b is not None and (b.archive, b.config) == ("/var/lib/images/b.tar", "/etc/containerd/config.toml:12")


def test_a_full_listing_names_what_went_unseen_and_an_event_keeps_the_target_current() -> None:
    index = filled()
    missing = index.replace("k8s.io", [("example.test/a:1", DIGEST_A, {})])
    assert sorted(g.ref for g in missing) == ["example.test/a:latest", "example.test/b:1"]
    assert {g.ref: g.image_id for g in missing}["example.test/b:1"] == ID_B
    assert index.unresolved([DIGEST_A, DIGEST_B]) == [DIGEST_B]  # dropped with its last reference
    index.put("k8s.io", "example.test/a:1", DIGEST_B, {})  # imported again with other content
    index.resolved(DIGEST_B, ID_B, 7)
    gone = index.take("k8s.io", "example.test/a:1")
    assert gone is not None and (gone.image_id, gone.size, gone.flags) == (ID_B, 7, 0)


def test_the_index_of_10000_references_stays_small() -> None:
    records: list[tuple[str, str, dict[str, str]]] = [(f"registry.example.test/team{i % 50}/app{i}:v{i % 7}.{i}", f"sha256:{i:064x}", {}) for i in range(10_000)]
    tracemalloc.start()
    index = ImageIndex()
    index.replace("k8s.io", records)
    for i in range(10_000):
        index.resolved(f"sha256:{i:064x}", f"sha256:{i + 1:064x}", i * 1000)
    del records
    held, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(index) == 10_000
    assert held < 8 * 1024 * 1024, f"{held / 2**20:.1f} MiB"


# -- wanted and pinned ----------------------------------------------------------------------------


def test_wanted_names_the_pattern_the_archive_directory_and_a_hand_pin() -> None:
    p = policy("example.test/a:*", f"{ID_B[:20]}*")
    assert wanted_reasons(p, ["example.test/a:1"], ID_A, FLAG_LABEL | FLAG_SYNC, []) == ("pattern example.test/a:*",)
    assert wanted_reasons(p, ["example.test/c:1"], ID_B, 0, []) == (f"pattern {ID_B[:20]}*",)
    assert wanted_reasons(p, ["example.test/c:1"], ID_A, 0, ["/srv/images/c.tar"]) == ("import_dirs /srv/images",)
    assert wanted_reasons(p, ["example.test/c:1"], ID_A, FLAG_LABEL, []) == ("pin",)
    assert wanted_reasons(policy(), ["example.test/c:1"], ID_A, 0, []) == ()
    # The crio dialect never matches an image ID, as CRI-O does not.
    crio = compile_policy([PatternEntry(f"{ID_B}", "test", "crio")])
    assert wanted_reasons(crio, ["example.test/c:1"], ID_B, 0, []) == ()


def test_pinned_says_how() -> None:
    assert pinned_reasons(FLAG_LABEL, ["/etc/containerd/config.toml:3"], False) == (
        "label", "runtime config /etc/containerd/config.toml:3")
    assert pinned_reasons(0, [], True) == ("cri",)
    assert pinned_reasons(FLAG_SYNC, [], False) == ()


# -- attribution --------------------------------------------------------------------------------


def request(at: float, ref: str = "", image_id: str = "", client: str = "kubelet", pid: int = 42,
            outcome: str = REQUEST_FORWARDED) -> RemoveRequest:
    return RemoveRequest(at, ref, outcome, image_id=image_id, client=client, pid=pid)


@pytest.mark.parametrize("said, refs, hit", [
    (ID_A, [], True), (ID_A.split(":")[1], [], True), (ID_A.split(":")[1][:12], [], True),
    (ID_A.split(":")[1][:8], [], False), (ID_B, [], False),
    ("example.test/a:1", ["example.test/a:1"], True), ("docker.io/library/busybox:latest", ["busybox"], True),
    ("example.test/a:2", ["example.test/a:1"], False),
])
def test_a_request_names_the_image_by_id_prefix_or_reference(said: str, refs: list[str], hit: bool) -> None:
    assert names_image(request(0, ref=said), ID_A, refs) is hit


def test_the_kubelet_and_other_clients_are_told_apart_within_the_window() -> None:
    t = 1000.0
    kubelet = attribute(ID_A, ["example.test/a:1"], t, t, [request(t - 0.3, image_id=ID_A)], proxy_pid=7)
    assert (kubelet.deleter, kubelet.client) == (DELETER_KUBELET, "kubelet")
    assert "pid 42" in kubelet.evidence and ID_A in kubelet.evidence
    crictl = attribute(ID_A, ["example.test/a:1"], t, t, [request(t - 1, ref="example.test/a:1", client="crictl")], 7)
    assert (crictl.deleter, crictl.client) == (DELETER_CRI_CLIENT, "crictl") and "crictl" in crictl.evidence
    # Too old, refused or failed, or for another image: it went outside the CRI, the proxy serving.
    for other in ([request(t - JOIN_BEFORE_S - 1, image_id=ID_A)], [request(t, image_id=ID_A, outcome=REQUEST_REFUSED)],
                  [request(t, image_id=ID_A, outcome=REQUEST_FAILED)], [request(t, image_id=ID_B)]):
        verdict = attribute(ID_A, ["example.test/a:1"], t, t, other, proxy_pid=7)
        assert verdict.deleter == DELETER_OUTSIDE_CRI and "runtime's own socket" in verdict.evidence
    # No proxy serving: unknown, and the evidence says what would tell.
    assert attribute(ID_A, ["example.test/a:1"], t, t, [], proxy_pid=None).deleter == DELETER_UNKNOWN


# -- the recorder ------------------------------------------------------------------------------


def recorder(tmp_path: Path) -> tuple[DeletionRecorder, Clock, Logged, list[Deletion]]:
    clock, log = Clock(), Logged()
    seen: list[Deletion] = []
    return DeletionRecorder(str(tmp_path / "history"), log, seen.append, clock), clock, log, seen


def test_the_refs_of_one_image_are_coalesced_into_one_deletion(tmp_path: Path) -> None:
    rec, clock, _log, seen = recorder(tmp_path)
    index = filled()
    for ref in ("example.test/a:1", "example.test/a:latest"):
        item = index.take("k8s.io", ref)
        assert item is not None
        rec.gone("containerd", item)
        clock.now += 0.2
    assert rec.flush(policy("example.test/a:*"), index.holds_image) == []  # not settled yet
    clock.now += deletions.SETTLE_S
    (written,) = rec.flush(policy("example.test/a:*"), index.holds_image)
    assert written.refs == ("example.test/a:1", "example.test/a:latest")
    assert (written.image_id, written.size, written.image_gone) == (ID_A, 1000, True)
    assert written.wanted == ("pattern example.test/a:*",) and written.pinned == ("label",)
    assert written.deleter == DELETER_UNKNOWN
    assert seen == [written]
    assert Journal(str(tmp_path / "history")).read().entries == [written]


def test_an_untag_keeps_image_gone_false(tmp_path: Path) -> None:
    rec, clock, _log, _seen = recorder(tmp_path)
    index = filled()
    item = index.take("k8s.io", "example.test/a:latest")
    assert item is not None
    rec.gone("containerd", item)
    clock.now += deletions.SETTLE_S
    (written,) = rec.flush(policy(), index.holds_image)
    assert written.image_gone is False and written.wanted == () and written.pinned == ()


def test_a_proxy_serving_and_its_request_name_the_deleter(tmp_path: Path) -> None:
    rec, clock, _log, _seen = recorder(tmp_path)
    history = str(tmp_path / "history")
    presence.mark_serving(history, "/run/pinctl/cri.sock", "/run/containerd/containerd.sock", pid=os.getpid())
    index = filled()
    # cri-proxy's entry lands after the event (it writes once the runtime answered OK).
    item = index.take("k8s.io", "example.test/b:1")
    assert item is not None
    rec.gone("containerd", item)
    clock.now += 0.5
    Journal(history).append(request(clock.now - 1.0, ref="example.test/b:1", client="crictl", pid=99))
    item = index.take("k8s.io", "example.test/a:1")
    assert item is not None
    rec.gone("containerd", item)
    clock.now += deletions.SETTLE_S
    by_ref = {d.refs[0]: d for d in rec.flush(policy(), index.holds_image)}
    b = by_ref["example.test/b:1"]
    assert (b.deleter, b.client) == (DELETER_CRI_CLIENT, "crictl") and "pid 99" in b.evidence
    assert b.wanted == ("import_dirs /var/lib/images",)
    assert b.pinned == ("label", "runtime config /etc/containerd/config.toml:12")
    a = by_ref["example.test/a:1"]
    assert a.deleter == DELETER_OUTSIDE_CRI and a.image_gone is False
    presence.clear(history, pid=os.getpid())


def test_a_reference_found_missing_by_a_listing_is_never_called_outside_the_cri(tmp_path: Path) -> None:
    rec, clock, _log, _seen = recorder(tmp_path)
    history = str(tmp_path / "history")
    presence.mark_serving(history, "/run/pinctl/cri.sock", "/run/containerd/containerd.sock", pid=os.getpid())
    index = filled()
    for item in index.replace("k8s.io", []):
        rec.gone("containerd", item, live=False, since=clock.now - 100)
    (a, b) = sorted(rec.flush(policy(), index.holds_image, force=True), key=lambda d: d.refs)
    assert a.deleter == DELETER_UNKNOWN and "not following" in a.evidence


def test_a_journal_that_cannot_be_written_warns_once_and_the_deletion_still_counts(tmp_path: Path) -> None:
    blocked = tmp_path / "history"
    blocked.write_text("a file where the directory should be")
    clock, log = Clock(), Logged()
    seen: list[Deletion] = []
    rec = DeletionRecorder(str(blocked), log, seen.append, clock)
    index = filled()
    for ref in ("example.test/a:1", "example.test/b:1"):
        item = index.take("k8s.io", ref)
        assert item is not None
        rec.gone("containerd", item)
        clock.now += deletions.SETTLE_S
        rec.flush(policy(), index.holds_image)
    assert len(seen) == 2
    assert [msg for _level, msg, _f in log].count("cannot write the deletion journal") == 1


def test_interned_digests_are_shared() -> None:
    index = ImageIndex()
    digest = "".join(["sha256:", "9" * 64])
    index.put("k8s.io", "example.test/x:1", digest, {})
    index.put("k8s.io", "example.test/x:2", "".join(["sha256:", "9" * 64]), {})
    refs = index.refs("k8s.io")
    assert refs["example.test/x:1"] is refs["example.test/x:2"] is sys.intern(digest)


def test_crio_lists_are_compared_and_the_cri_pin_kept() -> None:
    from pinctl.backends.cri import CriImage
    from pinctl.watch import tracking
    from pinctl.watch.index import FLAG_CRI

    index = ImageIndex()
    first = [CriImage("a" * 64, ("example.test/a:1", "example.test/a:2"), (), 100, True),
             CriImage("b" * 64, (), ("example.test/b@sha256:" + "e" * 64,), 50, False)]
    assert tracking.index_crio(index, first) == []
    missing = tracking.index_crio(index, first[1:])
    assert sorted(g.ref for g in missing) == ["example.test/a:1", "example.test/a:2"]
    assert {(g.image_id, g.size, g.flags) for g in missing} == {(ID_A, 100, FLAG_CRI)}
    assert pinned_reasons(FLAG_CRI, [], False) == ("cri",)
    (b,) = tracking.index_crio(index, [])
    assert (b.ref, b.image_id) == ("example.test/b@sha256:" + "e" * 64, ID_B)


# -- restore ------------------------------------------------------------------------------------


def deleted(wanted: tuple[str, ...], deleter: str = DELETER_OUTSIDE_CRI, refs: tuple[str, ...] = ("example.test/a:1",)
            ) -> Deletion:
    return Deletion(1.0, "containerd", "k8s.io", refs + (ID_A,), ID_A, 10, True, wanted, ("label",), deleter)


def test_restore_imports_pulls_or_says_why_not() -> None:
    from pinctl.journal import RESTORE_SKIPPED
    from pinctl.watch import restore

    clock = Clock()
    restorer = restore.Restorer(clock)
    p = policy("example.test/a:1", "example.test/b:*")
    job, entry = restorer.decide(deleted(("import_dirs /srv/images",)), p)
    assert entry is None and job is not None
    assert (job.how, job.refs, job.archives) == ("import", ("example.test/a:1",), ("/srv/images",))
    job, entry = restorer.decide(deleted(("pattern example.test/a:1",)), p)
    assert job is not None and (job.how, job.refs) == ("pull", ("example.test/a:1",))
    job, entry = restorer.decide(deleted(("pattern example.test/b:*",), refs=("example.test/b:1",)), p)
    assert job is None and entry is not None and entry.outcome == RESTORE_SKIPPED and "glob" in entry.detail
    job, entry = restorer.decide(deleted(("pattern example.test/a:1",), DELETER_KUBELET), p)
    assert job is None and entry is not None and "kubelet" in entry.detail
    assert restorer.decide(deleted(()), p) == (None, None)
    untagged = dataclasses.replace(deleted(("pattern example.test/b:*",), refs=("example.test/b:1",)), image_gone=False)
    job, entry = restorer.decide(untagged, p)
    assert job is None and entry is not None and "only its names went" in entry.detail


def test_an_image_deleted_again_soon_after_its_restore_is_not_restored_again_and_the_back_off_doubles() -> None:
    from pinctl.watch import restore

    clock = Clock()
    restorer = restore.Restorer(clock)
    p = policy("example.test/a:1")
    job, _ = restorer.decide(deleted(("pattern example.test/a:1",)), p)
    assert job is not None
    restorer.attempted(job)
    clock.now += 60
    job, entry = restorer.decide(deleted(("pattern example.test/a:1",)), p)
    assert job is None and entry is not None and "deleted again 60 s after" in entry.detail
    assert f"for {restore.BACKOFF_FIRST_S:.0f} s" in entry.detail
    clock.now += restore.BACKOFF_FIRST_S  # within the doubled back-off still
    job, entry = restorer.decide(deleted(("pattern example.test/a:1",)), p)
    assert job is None and entry is not None and f"for {2 * restore.BACKOFF_FIRST_S:.0f} s" in entry.detail
    clock.now += 4 * restore.BACKOFF_FIRST_S
    job, entry = restorer.decide(deleted(("pattern example.test/a:1",)), p)
    assert job is not None and entry is None


def test_an_import_restore_is_done_when_every_reference_is_back() -> None:
    from pinctl.journal import RESTORE_DONE, RESTORE_FAILED
    from pinctl.watch import restore

    job = restore.Job(deleted(("import_dirs /srv/images",)), "import", ("example.test/a:1",), ("/srv/images",))
    done = restore.import_outcome(job, {"example.test/a:1"}.__contains__, {})
    assert (done.outcome, done.how, done.image_id) == (RESTORE_DONE, "import from /srv/images", ID_A)
    failed = restore.import_outcome(job, set().__contains__, {"/srv/images/a.tar": "no room"})
    assert (failed.outcome, failed.detail) == (RESTORE_FAILED, "/srv/images/a.tar: no room")


# -- the kubelet's log -----------------------------------------------------------------------------


def test_the_kubelets_log_names_its_gc_removals_in_text_and_json(tmp_path: Path) -> None:
    import time as clock_time

    from pinctl.journal import DELETER_KUBELET_LOG, kubelet_log

    now = clock_time.time()
    local = clock_time.localtime(now - 5)
    header = clock_time.strftime("I%m%d %H:%M:%S", local) + ".123456    4242 image_gc_manager.go:529]"
    log = tmp_path / "kubelet.log"
    log.write_text(
        f'{header} "Removing image to free bytes" imageID="{ID_A}" size=1000 runtimeHandler=""\n'
        f'{header} "Image ID has size" imageID="{ID_B}" size=5\n'
        + json.dumps({"ts": now - 2, "msg": "Removing image to free bytes", "imageID": ID_B, "size": 5}) + "\n"
        + json.dumps({"ts": now - 7200, "msg": "Removing image to free bytes", "imageID": "sha256:" + "f" * 64}) + "\n")
    found = kubelet_log.removals(str(log), now - 600, now)
    assert set(found) == {ID_A, ID_B}
    assert abs(found[ID_A][0] - (now - 5)) < 1.5 and "imageID" in found[ID_A][1]
    assert kubelet_log.removals(str(tmp_path / "missing.log"), 0) == {}
    # The recorder names the kubelet from it when no cri-proxy serves.
    clock, log_calls = Clock(), Logged()
    clock.now = now
    seen: list[Deletion] = []
    rec = DeletionRecorder(str(tmp_path / "history"), log_calls, seen.append, clock)
    index = filled()
    item = index.take("k8s.io", "example.test/b:1")
    assert item is not None
    rec.gone("containerd", item)
    clock.now += deletions.SETTLE_S
    (written,) = rec.flush(policy(), index.holds_image, kubelet_log_path=str(log))
    assert (written.deleter, written.client) == (DELETER_KUBELET_LOG, "kubelet")
    assert str(log) in written.evidence and ID_B in written.evidence


def test_requests_are_read_from_the_journals_end_past_corrupt_and_newer_lines(tmp_path: Path) -> None:
    rec, clock, _log, _seen = recorder(tmp_path)
    history = tmp_path / "history"
    journal = Journal(str(history))
    history.mkdir()
    old = [encode(request(clock.now - 3600 + n * 0.001, ref=f"example.test/old:{n}", client="crictl"))
           for n in range(5000)]  # older requests: more than the tail holds
    # Out of order, as no writer makes it: a line this far back is not read at all (the read is bounded).
    old.insert(0, encode(request(clock.now - 2, ref="example.test/far-back:1", client="crictl")))
    with open(history / "journal.jsonl", "a") as stream:
        stream.write("\n".join(old) + "\n")
        stream.write('{"v":1,"kind":"remove-request","time":"garbage"}\n{"v":99,"kind":"remove-request"}\n{"v":1,')
    journal.append(request(clock.now - 1, ref="example.test/b:1", client="crictl", pid=7))
    assert os.path.getsize(history / "journal.jsonl") > deletions.REQUESTS_TAIL
    found = rec._requests(clock.now - 60)
    assert [(r.ref, r.pid) for r in found] == [("example.test/b:1", 7)]


def test_the_watchers_own_label_write_changes_the_flags_and_keeps_the_target() -> None:
    index = filled()
    assert index.relabel("k8s.io", "example.test/a:latest", {PIN_LABEL: "pinned", MANAGED_LABEL: "true"})
    assert not index.relabel("k8s.io", "example.test/unknown:1", {PIN_LABEL: "pinned"})
    gone = index.take("k8s.io", "example.test/a:latest")
    assert gone is not None and (gone.digest, gone.image_id, gone.flags) == (DIGEST_A2, ID_A, FLAG_LABEL | FLAG_SYNC)

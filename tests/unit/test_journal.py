"""The deletion journal: its line format, rotation, and what a reader does with a damaged file."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pinctl.journal import (JOURNAL_VERSION, Deletion, Entry, NewerEntry, RemoveRequest, Restore, decode, encode,
                            parse_stamp, stamp)
from pinctl.journal import presence
from pinctl.journal.store import CURRENT, Journal, JournalError, rotated

T0 = 1_765_000_000.25


def deletion(index: int = 0, **changes: object) -> Deletion:
    values: dict[str, object] = dict(time=T0 + index, runtime="containerd", namespace="k8s.io",
                                     refs=(f"example.test/web:{index}",), image_id="sha256:" + "ab" * 32,
                                     size=1234, wanted=("pattern example.test/web:*",), pinned=("label",),
                                     deleter="kubelet", client="kubelet", evidence="cri-proxy saw RemoveImage")
    values.update(changes)
    return Deletion(**values)  # type: ignore[arg-type]


def test_every_kind_survives_a_round_trip() -> None:
    entries: list[Entry] = [deletion(), RemoveRequest(time=T0, ref="web:1", outcome="refused", client="crictl", pid=42,
                                         detail="pinned by label"),
               Restore(time=T0, refs=("web:1",), outcome="restored", how="import /a.tar", image_id="sha256:1")]
    for entry in entries:
        line = encode(entry)
        assert "\n" not in line
        assert json.loads(line)["v"] == JOURNAL_VERSION
        assert decode(line) == entry


def test_times_are_utc_with_milliseconds() -> None:
    assert stamp(T0) == "2025-12-06T05:46:40.250Z"
    assert parse_stamp(stamp(T0)) == T0
    with pytest.raises(ValueError):
        parse_stamp("2025-12-06T05:46:40")


@pytest.mark.parametrize("line", ['{"v":1,"kind":"deleted"', "[]", '{"kind":"deleted"}',
                                  '{"v":1,"kind":"deleted","time":"2025-12-06T05:46:40.250Z","runtime":"c",'
                                  '"namespace":"","refs":"web:1"}',
                                  '{"v":1,"kind":"deleted","time":"2025-12-06T05:46:40.250Z","runtime":"c",'
                                  '"namespace":"","refs":[],"size":-1}',
                                  '{"v":1,"kind":"remove-request","time":"2025-12-06T05:46:40.250Z"}'])
def test_a_damaged_line_is_refused(line: str) -> None:
    with pytest.raises(ValueError) as raised:
        decode(line)
    assert not isinstance(raised.value, NewerEntry)


@pytest.mark.parametrize("line", ['{"v":2,"kind":"deleted"}', '{"v":1,"kind":"evicted","time":"x"}'])
def test_a_newer_line_is_told_apart(line: str) -> None:
    with pytest.raises(NewerEntry):
        decode(line)


def test_a_field_added_later_in_the_same_version_is_ignored() -> None:
    data = json.loads(encode(deletion()))
    data["added_later"] = {"x": 1}
    assert decode(json.dumps(data)) == deletion()


def test_rotation_keeps_the_bound_and_the_newest_entries(tmp_path: object) -> None:
    journal = Journal(str(tmp_path), max_bytes=1000, keep=2)
    for index in range(40):
        journal.append(deletion(index))
    names = sorted(os.listdir(str(tmp_path)))
    assert names == sorted([CURRENT, rotated(1), rotated(2), "journal.lock"])
    for name in (CURRENT, rotated(1), rotated(2)):
        assert os.path.getsize(os.path.join(str(tmp_path), name)) <= 1000
    read = journal.read()
    assert read.problems == []
    times = [entry.time for entry in read.entries]
    assert times == sorted(times)
    assert read.entries[-1] == deletion(39)
    assert len(read.entries) < 40  # the oldest went with the oldest file


def test_since_leaves_out_older_entries(tmp_path: object) -> None:
    journal = Journal(str(tmp_path))
    for index in range(5):
        journal.append(deletion(index))
    assert [e.time for e in journal.read(since=T0 + 3).entries] == [T0 + 3, T0 + 4]


def test_a_journal_never_written_reads_empty(tmp_path: object) -> None:
    read = Journal(str(tmp_path / "absent")).read()  # type: ignore[operator]
    assert read.entries == [] and read.problems == []


def test_a_line_cut_short_is_reported_and_the_next_append_starts_afresh(tmp_path: object) -> None:
    journal = Journal(str(tmp_path))
    journal.append(deletion(0))
    with open(journal.path(), "a") as stream:
        stream.write(encode(deletion(1))[:40])  # a writer killed mid-line
    assert len(journal.read().entries) == 1
    assert [p for p in journal.read().problems if "cut short" in p]
    journal.append(deletion(2))
    read = journal.read()
    assert read.entries == [deletion(0), deletion(2)]
    assert read.problems == [f"{journal.path()}: 1 corrupt or cut-short line skipped"]


def test_corrupt_and_newer_lines_are_skipped_and_counted(tmp_path: object) -> None:
    journal = Journal(str(tmp_path))
    journal.append(deletion(0))
    with open(journal.path(), "a") as stream:
        stream.write('{"v":9,"kind":"deleted"}\n\x00\x01garbage\n' + "x" * 70000 + "\n")
    journal.append(deletion(1))
    read = journal.read()
    assert read.entries == [deletion(0), deletion(1)]
    assert any("2 corrupt or cut-short lines" in p for p in read.problems)
    assert any("newer pinctl (journal version 9)" in p and "upgrade" in p for p in read.problems)


def test_an_unwritable_directory_is_one_error(tmp_path: object) -> None:
    blocker = os.path.join(str(tmp_path), "file")
    open(blocker, "w").close()
    with pytest.raises(JournalError) as raised:
        Journal(os.path.join(blocker, "history")).append(deletion())
    assert "cannot write the deletion journal" in str(raised.value)
    assert raised.value.exit_code == 1


def test_an_entry_whose_append_returned_survives_a_kill(tmp_path: object) -> None:
    """A writer killed right after append returns: the entry is on disk, whole."""
    code = ("import os, sys; from pinctl.journal.store import Journal; from pinctl.journal import Deletion;"
            "j = Journal(sys.argv[1]); j.append(Deletion(time=1.0, runtime='containerd', namespace='k8s.io',"
            " refs=('a:1',))); os.kill(os.getpid(), 9)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=False)
    assert done.returncode == -9
    assert Journal(str(tmp_path)).read().entries == [Deletion(time=1.0, runtime="containerd", namespace="k8s.io",
                                                              refs=("a:1",))]


def test_concurrent_writers_never_interleave_lines(tmp_path: object) -> None:
    code = ("import sys; from pinctl.journal.store import Journal; from pinctl.journal import RemoveRequest;"
            "j = Journal(sys.argv[1], max_bytes=20000, keep=50);"
            "[j.append(RemoveRequest(time=float(i), ref=sys.argv[2] * 50, outcome='forwarded')) for i in range(150)]")
    writers = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), letter]) for letter in "abc"]
    assert [w.wait() for w in writers] == [0, 0, 0]
    read = Journal(str(tmp_path), keep=50).read()
    assert read.problems == []
    assert sorted(e.ref[0] for e in read.entries if isinstance(e, RemoveRequest)) == sorted("abc" * 150)


def test_a_proxy_is_serving_only_while_its_process_lives(tmp_path: object) -> None:
    directory = str(tmp_path)
    assert presence.serving(directory) is None
    presence.mark_serving(directory, "/run/pinctl/cri.sock", "/run/containerd/containerd.sock")
    found = presence.serving(directory)
    assert found is not None and found.pid == os.getpid() and found.listen == "/run/pinctl/cri.sock"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    presence.mark_serving(directory, "/a", "/b", pid=int(gone.stdout))
    assert presence.serving(directory) is None  # a killed proxy's mark
    presence.clear(directory)  # not this process's mark: left alone
    assert presence.serving(directory, alive_only=False) is not None
    presence.mark_serving(directory, "/a", "/b")
    presence.clear(directory)
    assert presence.serving(directory, alive_only=False) is None


def test_a_mark_that_does_not_parse_counts_as_no_proxy(tmp_path: object) -> None:
    with open(os.path.join(str(tmp_path), presence.PRESENCE), "w") as stream:
        stream.write('{"pid": "x"')
    assert presence.serving(str(tmp_path)) is None


def test_a_pid_reused_by_another_process_is_not_the_proxy(tmp_path: object) -> None:
    directory = str(tmp_path)
    presence.mark_serving(directory, "/a", "/b")
    path = os.path.join(directory, presence.PRESENCE)
    with open(path) as stream:
        data = json.load(stream)
    assert data["start_ticks"] is not None
    data["start_ticks"] += 1  # this pid, but a process that started at another moment
    with open(path, "w") as stream:
        json.dump(data, stream)
    assert presence.serving(directory) is None
    assert presence.serving(directory, alive_only=False) is not None


def test_a_proxy_in_another_pid_namespace_is_serving_while_its_heartbeat_is_fresh(tmp_path: object) -> None:
    directory = str(tmp_path)
    presence.mark_serving(directory, "/a", "/b")
    path = os.path.join(directory, presence.PRESENCE)
    with open(path) as stream:
        data = json.load(stream)
    data.update(pid=999_999_999, pid_namespace="pid:[1]")  # the host's proxy, seen from a pod
    with open(path, "w") as stream:
        json.dump(data, stream)
    assert presence.serving(directory) is not None
    stale = os.path.getmtime(path) - presence.STALE_S - 1
    os.utime(path, (stale, stale))
    assert presence.serving(directory) is None  # killed: no heartbeat for three periods
    presence.touch(directory)
    assert presence.serving(directory) is not None

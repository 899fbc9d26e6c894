"""pinctl history over journal files written in tmp directories by the Journal class itself (the
real format, not a mock): what it selects, in which order, what it says of a damaged journal, and
the pointer ls and check give for a wanted image that is not on the node."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from pinctl.commands import check, ls
from pinctl.backends.cri import CriImage
from pinctl.commands.history import (HistoryRequest, history, latest_deletions, parse_since, pointer, term_matcher,
                                     went)
from pinctl.errors import EXIT_ERROR, EXIT_OK, EXIT_USAGE, UsageError
from pinctl.journal import (DELETER_CRI_CLIENT, DELETER_KUBELET, DELETER_KUBELET_LOG, DELETER_OUTSIDE_CRI,
                            DELETER_UNKNOWN, Deletion, RemoveRequest, Restore)
from pinctl.journal.store import CURRENT, Journal, JournalError, rotated
from pinctl.pins.policy import Policy

from .test_cli_wiring import invoke, store  # noqa: F401 - store is a fixture
from .test_commands import RUNTIME, FakeClock, FakeRuntime, node_of, policy_of, store_with_images

NOW = 1_765_000_000.0
ID_WEB = "sha256:" + "ab" * 32
ID_DB = "sha256:" + "cd" * 32


def deletion(ago: float, ref: str = "example.test/web:1.0", at: float = NOW, **changes: Any) -> Deletion:
    """A deletion ago seconds before at: NOW for what is compared as data, time.time() where
    pinctl itself says how long ago."""
    values: dict[str, Any] = dict(time=at - ago, runtime="containerd", namespace="k8s.io", refs=(ref,),
                                  image_id=ID_WEB, size=1234, wanted=("pattern example.test/web:*",), pinned=(),
                                  deleter=DELETER_KUBELET, client="kubelet",
                                  evidence="cri-proxy saw RemoveImage from the kubelet (pid 812)")
    values.update(changes)
    return Deletion(**values)


def write(directory: Path, *entries: Any, **journal: Any) -> Journal:
    target = Journal(str(directory), **journal)
    for entry in entries:
        target.append(entry)
    return target


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    """A node's morning: the kubelet's GC, a crictl rmi refused as pinned, ctr deleting a pinned
    import_dirs image and pinctl importing it again, and an image nobody wanted."""
    where = tmp_path / "history"
    write(where,
          deletion(7200),
          RemoveRequest(time=NOW - 3700, ref="example.test/db:2", outcome="refused", client="crictl", pid=4242,
                        detail="pinned by label", image_id=ID_DB),
          deletion(3600, "example.test/db:2", image_id=ID_DB, wanted=("import_dirs /srv/images",), pinned=("label",),
                   deleter=DELETER_OUTSIDE_CRI, client="", evidence="cri-proxy served and saw no RemoveImage"),
          Restore(time=NOW - 3590, refs=("example.test/db:2",), outcome="restored", how="import /srv/images/db.tar",
                  image_id=ID_DB),
          deletion(60, "docker.io/library/tools:3", image_id="sha256:" + "ef" * 32, wanted=(),
                   deleter=DELETER_CRI_CLIENT, client="crictl"))
    return where


def shown(result: Any) -> list[tuple[str, str]]:
    return [(entry.kind, (entry.ref if isinstance(entry, RemoveRequest) else entry.refs[0])) for entry in result.entries]


def test_deletions_newest_first_and_the_rest_with_all(journal: Path) -> None:
    result = history(HistoryRequest(str(journal)))
    assert shown(result) == [("deleted", "docker.io/library/tools:3"), ("deleted", "example.test/db:2"),
                             ("deleted", "example.test/web:1.0")]
    assert result.exit_code == EXIT_OK and result.problems == [] and result.journal_found
    everything = history(HistoryRequest(str(journal), everything=True))
    assert [kind for kind, _ in shown(everything)] == ["deleted", "restored", "deleted", "remove-request", "deleted"]


def test_wanted_keeps_the_images_pinctl_wanted(journal: Path) -> None:
    assert shown(history(HistoryRequest(str(journal), wanted_only=True))) == [
        ("deleted", "example.test/db:2"), ("deleted", "example.test/web:1.0")]
    # Restores are of wanted images, and a RemoveImage refused as pinned is about one.
    assert [kind for kind, _ in shown(history(HistoryRequest(str(journal), wanted_only=True, everything=True)))] == [
        "restored", "deleted", "remove-request", "deleted"]


@pytest.mark.parametrize("term, found", [
    ("example.test/web:1.0", ["example.test/web:1.0"]),
    ("tools:3", ["docker.io/library/tools:3"]),  # a short name as Docker and the CRI expand it
    ("abab", ["example.test/web:1.0"]),  # an image ID prefix
    ("sha256:cdcd", ["example.test/db:2"]),
    ("example.test/*", ["example.test/db:2", "example.test/web:1.0"]),
])
def test_terms_select_by_name_id_or_pattern(journal: Path, term: str, found: list[str]) -> None:
    result = history(HistoryRequest(str(journal), (term,)))
    assert [name for _, name in shown(result)] == found and result.exit_code == EXIT_OK


def test_a_name_also_selects_what_named_its_image_by_id(tmp_path: Path) -> None:
    """The kubelet's RemoveImage names the image ID alone; asked for by name, it still shows."""
    where = tmp_path / "history"
    write(where, RemoveRequest(time=NOW - 10, ref=ID_WEB, outcome="refused", image_id=ID_WEB, client="kubelet"),
          RemoveRequest(time=NOW - 5, ref=ID_DB, outcome="forwarded", image_id=ID_DB, client="kubelet"),
          deletion(1))
    result = history(HistoryRequest(str(where), ("example.test/web:1.0",), everything=True))
    assert shown(result) == [("deleted", "example.test/web:1.0"), ("remove-request", ID_WEB)]


def test_a_term_with_no_entry_is_named_and_exits_1_while_the_others_show(journal: Path) -> None:
    result = history(HistoryRequest(str(journal), ("example.test/web:1.0", "example.test/gone:9")))
    assert [name for _, name in shown(result)] == ["example.test/web:1.0"]
    assert result.unmatched == ["example.test/gone:9"] and result.exit_code == EXIT_ERROR


def test_a_malformed_term_reads_nothing(journal: Path) -> None:
    with pytest.raises(UsageError, match="malformed"):
        history(HistoryRequest(str(journal), ("Bad Name",)))


def test_since_leaves_out_what_came_before(journal: Path) -> None:
    result = history(HistoryRequest(str(journal), since=NOW - 3650))
    assert [name for _, name in shown(result)] == ["docker.io/library/tools:3", "example.test/db:2"]


@pytest.mark.parametrize("text, seconds", [("2h", 7200), ("7d", 7 * 86400), ("1d12h", 36 * 3600), ("90s", 90),
                                           ("1w", 7 * 86400), ("1.5h", 5400)])
def test_since_takes_a_span_back_from_now(text: str, seconds: float) -> None:
    assert parse_since(text, now=NOW) == NOW - seconds


def test_since_takes_an_rfc3339_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_since("2025-12-06T05:46:40Z") == NOW
    assert parse_since("2025-12-06T06:46:40+01:00") == NOW
    monkeypatch.setenv("TZ", "Etc/GMT-2")  # two hours east of UTC
    time.tzset()
    try:
        assert parse_since("2025-12-06T07:46:40") == NOW  # no offset: the node's local time
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    for bad in ("2 hours", "yesterday", "", "5y"):
        with pytest.raises(ValueError, match="span like 2h"):
            parse_since(bad)


def test_a_damaged_journal_shows_the_rest_and_says_what_was_skipped(tmp_path: Path) -> None:
    where = tmp_path / "history"
    write(where, deletion(300), deletion(200, "example.test/b:1"))
    with open(where / CURRENT, "a") as stream:
        stream.write('{"v":1,"kind":"deleted","time":"broken"}\n')  # corrupt
        stream.write('{"v":9,"kind":"deleted"}\n')  # a newer pinctl
        stream.write('{"v":1,"kind":"deleted","ti')  # cut short by a kill
    result = history(HistoryRequest(str(where)))
    assert [name for _, name in shown(result)] == ["example.test/b:1", "example.test/web:1.0"]
    assert len(result.problems) == 3 and result.exit_code == EXIT_OK
    assert any("cut short" in p for p in result.problems) and any("upgrade pinctl" in p for p in result.problems)


def test_no_journal_yet_is_empty_and_said(tmp_path: Path) -> None:
    result = history(HistoryRequest(str(tmp_path / "never-written")))
    assert result.entries == [] and not result.journal_found and result.exit_code == EXIT_OK
    (tmp_path / "empty").mkdir()
    assert not history(HistoryRequest(str(tmp_path / "empty"))).journal_found


def test_an_unreadable_journal_is_one_error_with_the_fix(tmp_path: Path) -> None:
    # Root reads any mode, so the directory is made unreadable by being a file.
    (tmp_path / "history").write_text("not a directory")
    with pytest.raises(JournalError, match="PINCTL_HISTORY_DIR"):
        history(HistoryRequest(str(tmp_path / "history")))


# -- the pointer of ls and check --------------------------------------------------------------


def test_latest_deletion_is_the_newest_naming_the_image(tmp_path: Path) -> None:
    where = tmp_path / "history"
    write(where, deletion(9000, deleter=DELETER_UNKNOWN), deletion(100, deleter=DELETER_KUBELET_LOG),
          deletion(50, "example.test/other:1"))
    found = latest_deletions(str(where), ["example.test/web:1.0", "abab", "example.test/never:1", "Bad Name"])
    assert found["example.test/web:1.0"].deleter == DELETER_KUBELET_LOG
    assert found["abab"].time == NOW - 50  # by ID: the newest of the image's deletions
    assert set(found) == {"example.test/web:1.0", "abab"}


def test_latest_deletion_of_many_names_decodes_only_the_lines_naming_them(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A policy may name a hundred images the node never had: one pass over the file, and only
    the lines that name one of them are decoded."""
    from pinctl.commands import history as history_module

    where = tmp_path / "history"
    write(where, *(deletion(1000 - n, f"example.test/seen{n}:1", image_id=f"sha256:{n:04x}" + "e" * 60) for n in range(50)),
          deletion(5, "tools:3", runtime="docker", namespace=""))
    decoded: list[bytes] = []
    real = history_module._decoded
    def counted(line: bytes) -> Any:
        decoded.append(line)
        return real(line)

    monkeypatch.setattr(history_module, "_decoded", counted)
    names = [f"example.test/never{n}:1" for n in range(200)] + ["example.test/seen7:1", "docker.io/library/tools:3",
                                                                 "0009eeee"]
    found = latest_deletions(str(where), names)
    assert {name: entry.refs[0] for name, entry in found.items()} == {
        "example.test/seen7:1": "example.test/seen7:1", "docker.io/library/tools:3": "tools:3",
        "0009eeee": "example.test/seen9:1"}
    assert len(decoded) == 3


def test_latest_deletion_reads_the_two_newest_files_only(tmp_path: Path) -> None:
    where = tmp_path / "history"
    small = write(where, deletion(9000, "example.test/oldest:1"), max_bytes=600, keep=4)
    for n in range(3):
        small.append(deletion(100 - n, f"example.test/n{n}:1"))
    names = sorted(os.listdir(where))
    assert rotated(3) in names  # the oldest entry is in a file ls does not read
    assert latest_deletions(str(where), ["example.test/oldest:1"]) == {}
    assert "example.test/oldest:1" in [name for _, name in shown(history(HistoryRequest(str(where))))]
    assert set(latest_deletions(str(where), ["example.test/n2:1", "example.test/n1:1", "example.test/n0:1"])) == {
        "example.test/n2:1", "example.test/n1:1"}


def test_latest_deletion_skips_damaged_lines_and_an_unreadable_journal(tmp_path: Path) -> None:
    where = tmp_path / "history"
    write(where, deletion(100))
    with open(where / CURRENT, "a") as stream:
        stream.write('{"v":1,"kind":"deleted","refs":["example.test/web:1.0"],"ti\n')
    assert latest_deletions(str(where), ["example.test/web:1.0"])["example.test/web:1.0"].time == NOW - 100
    (tmp_path / "file").write_text("x")
    assert latest_deletions(str(tmp_path / "file"), ["example.test/web:1.0"]) == {}


@pytest.mark.parametrize("deleter, client, said", [
    (DELETER_KUBELET, "kubelet", "by the kubelet (cri-proxy saw its RemoveImage)"),
    (DELETER_CRI_CLIENT, "crictl", "by crictl through the CRI"),
    (DELETER_OUTSIDE_CRI, "", "outside the CRI (ctr, nerdctl or docker"),
    (DELETER_KUBELET_LOG, "", "by the kubelet (its log names the image)"),
    (DELETER_UNKNOWN, "", "by something the node cannot name"),
])
def test_the_pointer_says_when_who_and_where_to_read_more(deleter: str, client: str, said: str) -> None:
    line = pointer("example.test/web:1.0", deletion(7200, deleter=deleter, client=client), now=NOW)
    assert line.startswith("deleted 2h ago ") and said in line
    assert line.endswith("; see pinctl history example.test/web:1.0")
    assert went(deletion(30, image_gone=False), now=NOW).startswith("untagged 30s ago")


def test_ls_points_an_unmatched_name_at_its_journal_entry(tmp_path: Path) -> None:
    where = tmp_path / "history"
    write(where, deletion(7260, "example.test/gone:1", at=time.time()))
    node = node_of(store_with_images())
    query = ls.LsQuery(("example.test/gone:1", "example.test/never:1"), history_dir=str(where))
    result = ls.ls(node, Policy(), query)
    assert result.unmatched == ["example.test/gone:1", "example.test/never:1"]
    said = result.went["example.test/gone:1"]
    assert said.startswith("deleted 2h ago ") and "by the kubelet" in said and "pinctl history example.test/gone:1" in said
    assert "example.test/never:1" not in result.went


def test_ls_names_the_policy_s_absent_images_the_journal_saw_go(tmp_path: Path) -> None:
    where = tmp_path / "history"
    write(where, *(deletion(100 + n, f"example.test/gone:{n}") for n in range(7)))
    names = [f"example.test/gone:{n}" for n in range(7)]
    policy = policy_of("example.test/app:1", "example.test/never:1", "example.test/*", *names)
    result = ls.ls(node_of(store_with_images()), policy, ls.LsQuery(history_dir=str(where),
                                                                                point_absent=True))
    lines = result.deleted_wanted
    assert len(lines) == ls.DELETED_WANTED_LINES
    assert lines[0].startswith("example.test/gone:0, wanted by the policy (test), is not on the node: deleted ")
    assert lines[-1] == "and 3 more wanted images deleted: pinctl history --wanted"
    assert not any("never" in line or "app:1" in line for line in lines)


def test_ls_reads_no_journal_when_every_wanted_image_is_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    from pinctl.commands import history as history_module

    asked: list[list[str]] = []
    def latest_deletions(directory: str, names: list[str]) -> dict[str, Deletion]:
        asked.append(list(names))
        return {}

    monkeypatch.setattr(history_module, "latest_deletions", latest_deletions)
    node = node_of(store_with_images())
    ls.ls(node, policy_of("example.test/app:1", "example.test/*"),
                ls.LsQuery(history_dir=str(tmp_path), point_absent=True))
    ls.ls(node, policy_of("example.test/gone:1"), ls.LsQuery(history_dir=str(tmp_path)))
    assert asked == []
    ls.ls(node, policy_of("example.test/gone:1"), ls.LsQuery(history_dir=str(tmp_path), point_absent=True))
    assert asked == [["example.test/gone:1"]]


class StatusRuntime(FakeRuntime):
    def image_status(self, ref: str) -> Optional[CriImage]:
        return None if "gone" in ref else super().list_images()[0]


def test_check_of_a_deleted_image_names_who_deleted_it(tmp_path: Path) -> None:
    where = tmp_path / "history"
    write(where, deletion(3 * 3600 + 60, "example.test/gone:1", at=time.time(), deleter=DELETER_OUTSIDE_CRI, client=""))
    request = check.CheckRequest(("example.test/gone:1", "example.test/gone:2"), history_dir=str(where))
    report = check.check(node_of(store_with_images()), Policy(), lambda: (StatusRuntime(0), RUNTIME), request,
                            lambda *_: None, FakeClock())
    items = {item.refs[0]: item for item in report.result.items}
    gone = items["example.test/gone:1"]
    assert gone.cause is not None and gone.cause.startswith("the runtime knows no image by this name: it was deleted 3h ago")
    assert "outside the CRI" in gone.cause and gone.fix is not None and "pinctl history example.test/gone:1" in gone.fix
    assert items["example.test/gone:2"].cause == "the runtime knows no image by this name"
    assert report.exit_code == EXIT_ERROR


def test_check_of_an_absent_name_a_pattern_covers_says_it_is_wanted(tmp_path: Path) -> None:
    request = check.CheckRequest(("example.test/gone:1", "other.test/gone:1"), history_dir=str(tmp_path))
    report = check.check(node_of(store_with_images()), policy_of("example.test/*"),
                            lambda: (StatusRuntime(0), RUNTIME), request, lambda *_: None, FakeClock())
    wanted = {item.refs[0]: item.desired for item in report.result.items if item.refs[0].endswith("gone:1")}
    assert wanted == {"example.test/gone:1": True, "other.test/gone:1": False}


# -- the command line -------------------------------------------------------------------------


def test_history_cli_exit_codes_and_streams(journal: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PINCTL_HISTORY_DIR", str(journal))
    monkeypatch.setenv("PINCTL_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    code, out, err = invoke("history", "-o", "json", "example.test/web:1.0")
    assert code == EXIT_OK and err == ""
    assert [entry["refs"] for entry in json.loads(out)["entries"]] == [["example.test/web:1.0"]]
    code, out, err = invoke("history", "example.test/nothere:1")
    assert code == EXIT_ERROR and out.splitlines() == ["TIME   IMAGE   WANTED   PINNED   DELETER   WHY"]
    assert "no deletion of example.test/nothere:1" in err
    code, out, err = invoke("history", "--since", "yesterday")
    assert code == EXIT_USAGE and out == "" and len(err.splitlines()) == 1 and "span like 2h" in err
    code, out, err = invoke("history", "-q", "--all")
    assert code == EXIT_OK and out.splitlines() == ["docker.io/library/tools:3", "example.test/db:2",
                                                    "example.test/web:1.0"]
    (tmp_path / "blocked").write_text("")
    code, out, err = invoke("history", "--history-dir", str(tmp_path / "blocked"))
    assert code == EXIT_ERROR and out == "" and len(err.splitlines()) == 1 and "PINCTL_HISTORY_DIR" in err


def test_history_cli_without_a_journal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PINCTL_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    code, out, err = invoke("history", "--history-dir", str(tmp_path / "nothing"))
    assert code == EXIT_OK and out.split() == ["TIME", "IMAGE", "WANTED", "PINNED", "DELETER", "WHY"]
    assert err.splitlines() == [f"pinctl: history: no deletion journal in {tmp_path / 'nothing'} yet: pinctl sync "
                                "--watch writes it there as images go (history_dir, PINCTL_HISTORY_DIR)"]


def test_ls_and_check_cli_point_at_the_journal(store: Any, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                                               tmp_path: Path) -> None:
    where = tmp_path / "history"
    write(where, deletion(7260, "example.test/gone:1", at=time.time(), image_id="sha256:" + "99" * 32))
    monkeypatch.setenv("PINCTL_HISTORY_DIR", str(where))
    code, out, err = invoke("ls", "example.test/gone:1")
    assert code == EXIT_ERROR and len(out.splitlines()) == 1  # the header alone; named, and not there
    assert "no image matches example.test/gone:1: deleted 2h ago by the kubelet" in err
    assert "see pinctl history example.test/gone:1" in err
    monkeypatch.setenv("PINCTL_PINNED_IMAGES", "example.test/gone:1")
    code, out, err = invoke("ls")
    assert code == EXIT_OK and "example.test/gone:1, wanted by the policy" in err
    code, out, err = invoke("ls", "-q", "--pinned")
    assert "wanted by the policy" not in err
    code, out, err = invoke("check", "example.test/gone:1")
    assert code == EXIT_ERROR and "pinctl history example.test/gone:1 says who and why" in out
    assert "it was deleted 2h ago by the kubelet" in out

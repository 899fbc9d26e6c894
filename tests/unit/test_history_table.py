"""pinctl history as an operator reads it: at 60, 80 and 200 columns, into a pipe, with -o wide,
-q and JSON. The image's name is never shortened: every other column gives way first, then a
row whose name does not fit folds; WHY goes on under its row rather than push a line past the
window."""

from __future__ import annotations

import io
import json
import time
from typing import Any, Iterator

import pytest
from rich.cells import cell_len

from pinctl.commands.history import HistoryResult
from pinctl.journal import DELETER_CRI_CLIENT, DELETER_OUTSIDE_CRI, Deletion, RemoveRequest, Restore, stamp
from pinctl.render import history as render

from .test_output import Terminal, strip_ansi

NOW = 1_765_000_000.0
LONG = "registry.example.test/platform/observability/agent:v1.2.3-rc.1"
WEB = "example.test/web:1.0"


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is the machine's: the tests fix it at UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.delenv("TZ")
    time.tzset()


def entries() -> list[Any]:
    return [
        Deletion(NOW - 60, "containerd", "k8s.io", ("example.test/tool:3",), "sha256:" + "ef" * 32, None,
                 deleter=DELETER_CRI_CLIENT, client="crictl", evidence="cri-proxy saw RemoveImage from crictl (pid 99)"),
        Restore(NOW - 3590, (LONG,), "restored", "import /var/lib/pinctl/images/agent.tar", "sha256:" + "cd" * 32),
        Deletion(NOW - 3600, "containerd", "k8s.io", (LONG,), "sha256:" + "cd" * 32, 99_000_000,
                 wanted=("import_dirs /var/lib/pinctl/images",), pinned=("label",), deleter=DELETER_OUTSIDE_CRI,
                 evidence="cri-proxy served and saw no RemoveImage"),
        RemoveRequest(NOW - 3700, "example.test/db:2", "refused", client="crictl", pid=4242, detail="pinned by label"),
        Deletion(NOW - 2 * 86400, "containerd", "k8s.io", (WEB, "sha256:" + "ab" * 32), "sha256:" + "ab" * 32, 12345678,
                 wanted=("pattern example.test/web:*",), deleter="kubelet", client="kubelet",
                 evidence="cri-proxy saw RemoveImage from the kubelet (pid 812)"),
    ]


def result(everything: bool = False) -> HistoryResult:
    shown = [e for e in entries() if everything or isinstance(e, Deletion)]
    return HistoryResult("/var/lib/pinctl/history", shown)


def on_terminal(width: int, monkeypatch: pytest.MonkeyPatch, everything: bool = False, fmt: str = "table") -> list[str]:
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setenv("NO_COLOR", "1")
    out = Terminal()
    render.print_history(result(everything), fmt, everything=everything, out=out, now=NOW)  # type: ignore[arg-type]
    return strip_ansi(out.getvalue()).splitlines()


def column(lines: list[str], header: str, after: str) -> list[str]:
    head = lines[0]
    start, end = head.index(header), head.index(after)
    return [line[start:end].strip() for line in lines[1:] if line[:4].strip() and line[start:end].strip()]


def test_at_200_columns_every_cell_is_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = on_terminal(200, monkeypatch)
    assert all(cell_len(line) <= 200 for line in lines), "\n".join(lines)
    assert lines[0].split() == ["TIME", "IMAGE", "WANTED", "PINNED", "DELETER", "WHY"]
    assert column(lines, "TIME", "IMAGE") == ["Dec 06 05:45", "Dec 06 04:46", "Dec 04 05:46"]
    assert column(lines, "IMAGE", "WANTED") == ["example.test/tool:3", LONG, WEB]
    assert column(lines, "WANTED", "PINNED") == ["-", "import_dirs /var/lib/pinctl/images", "pattern example.test/web:*"]
    assert column(lines, "PINNED", "DELETER") == ["no", "label", "no"]
    assert lines[2].endswith("no RemoveImage while cri-proxy served: ctr, nerdctl or docker")
    assert lines[3].endswith("the kubelet's image GC: cri-proxy saw its RemoveImage")


def test_at_80_columns_a_name_too_long_for_its_row_folds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = on_terminal(80, monkeypatch)
    assert all(cell_len(line) <= 80 for line in lines), "\n".join(lines)
    # The 62-cell name has a line of its own, whole; its row goes on under it.
    at = lines.index(LONG)
    assert lines[at + 1].split()[:4] == ["04:46", "import", "label", "not"], "\n".join(lines)
    names = column([line for line in lines if line != LONG], "IMAGE", "WANTED")
    assert names == ["example.test/tool:3", WEB]
    # What gave way before a row folded: the kind of each reason, the deleter's short form, the time.
    assert column([line for line in lines if line != LONG], "DELETER", "WHY") == ["crictl", "not CRI", "kubelet"]
    assert "…" not in "\n".join(lines)


def test_at_60_columns_a_20_cell_name_stays_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = on_terminal(60, monkeypatch)
    assert all(cell_len(line) <= 60 for line in lines), "\n".join(lines)
    assert any(line.startswith(f"Dec 04  {WEB}  ") for line in lines), "\n".join(lines)
    # Wider than the window alone: cut into a pattern that names it and no other entry.
    [cut] = [line for line in lines if line.startswith("*")]
    assert cut.endswith("/agent:v1.2.3-rc.1*") and cut[1:-1] in LONG and cell_len(cut) == 60
    joined = " ".join(line.strip() for line in lines if line.startswith("    "))
    assert "ctr, nerdctl or docker" in joined and "cri-proxy saw its RemoveImage" in joined


def test_all_at_60_columns_leaves_event_to_why(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = on_terminal(60, monkeypatch, everything=True)
    assert all(cell_len(line) <= 60 for line in lines), "\n".join(lines)
    assert "EVENT" not in lines[0] and column(lines, "IMAGE", "WANTED")[-1] == WEB
    under = " ".join(line.strip() for line in lines if line.startswith("    "))
    assert "refused by cri-proxy: pinned by label" in under and "imported again from" in under


def test_all_shows_each_kind_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = on_terminal(200, monkeypatch, everything=True)
    assert lines[0].split()[:3] == ["TIME", "EVENT", "IMAGE"]
    assert column(lines, "EVENT", "IMAGE") == ["deleted", "restored", "deleted", "RemoveImage", "deleted"]
    text = "\n".join(lines)
    assert "refused by cri-proxy: pinned by label" in text
    assert "imported again from /var/lib/pinctl/images/agent.tar" in text


def test_into_a_pipe_every_value_is_whole_and_wide_adds_the_figures() -> None:
    out = io.StringIO()
    render.print_history(result(), "table", out=out, now=NOW)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["TIME", "IMAGE", "WANTED", "PINNED", "DELETER", "WHY"]
    assert LONG in lines[2] and "crictl (cri-client)" in lines[1] and "outside the CRI" in lines[2]
    assert "import_dirs /var/lib/pinctl/images" in lines[2]
    wide = io.StringIO()
    render.print_history(result(True), "wide", everything=True, out=wide, now=NOW)
    rows = wide.getvalue().splitlines()
    assert rows[0].split() == ["TIME", "EVENT", "IMAGE", "IMAGE", "ID", "SIZE", "NAMESPACE", "RUNTIME", "WANTED",
                               "PINNED", "DELETER", "WHY"]
    assert rows[1].startswith(stamp(NOW - 60))  # UTC, to the millisecond
    assert f"{WEB}, sha256:{'ab' * 32}" in rows[5] and "11.8 MiB" in rows[5]
    assert rows[5].endswith("cri-proxy saw RemoveImage from the kubelet (pid 812)")  # the full evidence
    assert rows[4].endswith("refused by cri-proxy: pinned by label (pid 4242)")


def test_the_kubelet_s_request_by_id_shows_the_image_s_name() -> None:
    by_id = RemoveRequest(NOW - 5000, "sha256:" + "ab" * 32, "refused", image_id="sha256:" + "ab" * 32,
                          client="kubelet", detail="pinned by label")
    found = HistoryResult("/x", [*entries(), by_id])
    out = io.StringIO()
    render.print_history(found, "table", everything=True, out=out, now=NOW)
    [row] = [line for line in out.getvalue().splitlines() if "refused" in line and "kubelet" in line]
    assert row.split()[4] == WEB and "refused by cri-proxy: pinned by label" in row  # Dec 06 HH:MM RemoveImage NAME
    wide = io.StringIO()
    render.print_history(found, "wide", everything=True, out=wide, now=NOW)
    assert "RemoveImage   sha256:" + "ab" * 32 in wide.getvalue()  # -o wide: the request as it was sent


def test_quiet_prints_names_newest_first_once_each() -> None:
    out = io.StringIO()
    render.print_history(result(True), "table", quiet=True, everything=True, out=out, now=NOW)
    assert out.getvalue().splitlines() == ["example.test/tool:3", LONG, "example.test/db:2", WEB]
    nameless = HistoryResult("/x", [Deletion(NOW, "containerd", "k8s.io", ("sha256:" + "ab" * 32,), "sha256:" + "ab" * 32)])
    out = io.StringIO()
    render.print_history(nameless, "table", quiet=True, out=out, now=NOW)
    assert out.getvalue() == "sha256:" + "ab" * 32 + "\n"


def test_stderr_says_the_problems_the_count_and_the_names_without_an_entry(capsys: pytest.CaptureFixture[str]) -> None:
    found = result()
    found.problems = ["/var/lib/pinctl/history/journal.jsonl: the last line was cut short (a writer was killed "
                      "mid-write)"]
    found.unmatched = ["example.test/gone:1"]
    render.print_history(found, "table", out=io.StringIO(), now=NOW)
    assert capsys.readouterr().err.splitlines() == [
        "pinctl: history: /var/lib/pinctl/history/journal.jsonl: the last line was cut short (a writer was killed "
        "mid-write)",
        "pinctl: history: no deletion of example.test/gone:1 in /var/lib/pinctl/history (--all also shows "
        "RemoveImage requests and restores)",
        "pinctl: history: 3 deletions (2 of images pinctl wanted) in /var/lib/pinctl/history",
    ]


def render_history_json() -> dict[str, Any]:
    out = io.StringIO()
    render.print_history(result(True), "json", everything=True, out=out, now=NOW)
    return json.loads(out.getvalue())


def test_json_keeps_every_field_as_the_journal_does() -> None:
    doc = render_history_json()
    assert sorted(doc) == ["entries", "journal", "pinctl_result_version", "problems", "unmatched"]
    first, restore, _, request, last = doc["entries"]
    assert first == {"kind": "deleted", "time": stamp(NOW - 60), "runtime": "containerd", "namespace": "k8s.io",
                     "refs": ["example.test/tool:3"], "image_id": "sha256:" + "ef" * 32, "size": None,
                     "image_gone": True, "wanted": [], "pinned": [], "deleter": "cri-client", "client": "crictl",
                     "evidence": "cri-proxy saw RemoveImage from crictl (pid 99)"}
    assert sorted(request) == ["client", "detail", "image_id", "kind", "outcome", "pid", "ref", "time"]
    assert sorted(restore) == ["detail", "how", "image_id", "kind", "namespace", "outcome", "refs", "runtime", "time"]
    assert last["refs"] == [WEB, "sha256:" + "ab" * 32] and last["wanted"] == ["pattern example.test/web:*"]

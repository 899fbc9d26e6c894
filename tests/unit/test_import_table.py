"""import's results as an operator reads them at 80 columns: references never cut (a row whose
reference does not fit folds), a result never split over two lines, the archive folded or
shortened instead, an empty WHY
taking no space; a lone failure said in one line; people's words (already pinned) while the JSON
keeps its values."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.cells import cell_len

from pinctl.imports.run import ImportItem, ImportReport
from pinctl.render import imports as import_output

from .test_output import Terminal, strip_ansi

ARCHIVE = "archives/node-images-2024-11-30-release.tar"
REFS = ["example.test/alpha:1.0", "example.test/alpha:latest", "localhost:5000/team/alpha:1.0",
        "example.test/epsilon:3.1", "localhost:5000/tools/zeta:0.9", "localhost:5000/platform/observability/agent-eta:0.9"]
RUNTIME = "containerd 1.7.24~ds1 at unix:///tmp/pinctl-sandbox/s/containerd.sock (snapshotter native)"


def item(ref: str, archive: str = ARCHIVE, action: str = "present", pin: str | None = "already-pinned",
         platforms: tuple[str, ...] = ("linux/amd64",), why: str | None = None) -> ImportItem:
    return ImportItem(archive, ref, "k8s.io", action, why, pin, "sha256:" + "b" * 64, platforms, 40960)  # type: ignore[arg-type]


def terminal_table(items: list[ImportItem], monkeypatch: pytest.MonkeyPatch, width: int = 80) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setenv("NO_COLOR", "1")
    out = Terminal()
    import_output.print_import(ImportReport(RUNTIME, items, 80.0), "table", out)
    return strip_ansi(out.getvalue()).splitlines()


def cells_of(lines: list[str], header: str, next_header: str) -> list[str]:
    """The text of one column on each row line, by where its header starts."""
    head = next(line for line in lines if line.startswith("REF") or line.startswith("ARCHIVE "))
    start, end = head.index(header), head.index(next_header)
    rows = lines[lines.index(head) + 1:]
    return [line[start:end].strip() for line in rows if line[start:end].strip()]


def test_one_archive_folds_into_a_heading_and_every_reference_stays_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    items = [item(ref) for ref in REFS] + [item("example.test/new:1", action="imported", pin="pinned")]
    lines = terminal_table(items, monkeypatch)
    assert all(cell_len(line) <= 80 for line in lines), "\n".join(lines)
    assert lines[:2] == [f"ARCHIVE: {ARCHIVE}", "PLATFORMS: linux/amd64"]
    # The 51-cell reference does not fit its row: it has a line of its own, the row under it.
    at = lines.index(REFS[5])
    assert lines[at + 1].split()[:3] == ["present,", "already", "pinned"]
    refs = [ref for ref in cells_of([line for line in lines if line != REFS[5]], "REF", "RESULT")]
    assert refs == REFS[:5] + ["example.test/new:1"]  # the ones that fit stay whole, on their rows
    results = cells_of([line for line in lines if line != REFS[5]], "RESULT", "SIZE")
    assert results == ["present, already pinned"] * len(REFS) + ["imported, pinned"]
    header = next(line for line in lines if line.startswith("REF"))
    assert "WHY" not in header.split()  # nothing to say takes no column


def test_several_archives_give_way_before_the_references(monkeypatch: pytest.MonkeyPatch) -> None:
    paths = [f"/var/lib/pinctl/images/team-platform/observability/{name}.tar" for name in ("agent", "collector")]
    items = [item(ref, archive=paths[n % 2], platforms=("linux/amd64", "linux/arm64") if n else ("linux/amd64",),
                  pin="pinned" if n % 3 else "already-pinned") for n, ref in enumerate(REFS)]
    lines = terminal_table(items, monkeypatch)
    assert all(cell_len(line) <= 80 for line in lines), "\n".join(lines)
    # No row has room for a reference once the archive is shortened: each has a line of its own.
    assert lines[0] == "REF" and lines[1].split()[:2] == ["ARCHIVE", "RESULT"]
    assert [line for line in lines if not line.startswith(" ")][1:] == REFS
    under = [line for line in lines[2:] if line.startswith("    /")]
    assert len(under) == len(REFS) and all("…" in line.split()[0] and line.split()[0].endswith(".tar") for line in under)
    results = {" ".join(line.split()[1:4]).rstrip(",").replace(" amd64", "") for line in under}
    assert results == {"present, already pinned", "present, pinned"}, under


def test_a_why_is_shown_when_a_row_has_one(monkeypatch: pytest.MonkeyPatch) -> None:
    items = [item(REFS[0]), item(REFS[1], action="failed", pin=None, why="interrupted")]
    lines = terminal_table(items, monkeypatch)
    assert any(line.strip() == "error: interrupted" for line in lines), lines


def test_a_lone_failure_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    failed = ImportItem("nothere.tar", "", "k8s.io", "failed", "nothere.tar: cannot be opened: no such file or directory")
    lines = terminal_table([failed], monkeypatch)
    assert lines == []
    assert capsys.readouterr().err.splitlines() == ["pinctl: nothere.tar: cannot be opened: no such file or directory"]
    # Into a pipe the row stays on stdout for scripts; stderr still says it once, naming the archive once.
    out = io.StringIO()
    import_output.print_import(ImportReport(RUNTIME, [failed], 80.0), "table", out)
    assert out.getvalue().splitlines()[1].split()[:3] == ["nothere.tar", "-", "failed"]
    assert capsys.readouterr().err.splitlines() == ["pinctl: nothere.tar: cannot be opened: no such file or directory"]


def test_people_read_already_pinned_and_json_keeps_already_pinned(capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    import_output.print_import(ImportReport(RUNTIME, [item(REFS[0])], 80.0), "table", out)
    assert "present, already pinned" in out.getvalue() and "already-pinned" not in out.getvalue()
    assert re.fullmatch(r"pinctl: import: 1 present \(through containerd .*\)\n", capsys.readouterr().err)
    out = io.StringIO()
    import_output.print_import(ImportReport(RUNTIME, [item(REFS[0])], 80.0), "json", out)
    assert json.loads(out.getvalue())["imports"][0]["pin"] == "already-pinned"


def test_pull_speaks_as_import_does(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """One form of summary (pinctl: pull: ...), people's words for the pin, a lone failure in one line."""
    from pinctl.pull.run import PullItem, PullReport
    from pinctl.render import pull as pull_output

    out = io.StringIO()
    present = PullItem("example.test/app:1", "k8s.io", "present", None, "already-pinned", "sha256:" + "a" * 64, 10)
    pull_output.print_pull(PullReport("containerd 1.7", [present, present], 80.0), "table", out)
    assert "present, already pinned" in out.getvalue() and "already-pinned" not in out.getvalue()
    assert capsys.readouterr().err == "pinctl: pull: 2 present (through containerd 1.7)\n"
    monkeypatch.setenv("COLUMNS", "80")
    terminal = Terminal()
    failed = PullItem("example.test/gone:1", "k8s.io", "failed", "not found")
    pull_output.print_pull(PullReport("containerd 1.7", [failed], 80.0), "table", terminal)
    assert terminal.getvalue() == ""
    assert capsys.readouterr().err == "pinctl: pull example.test/gone:1: not found\n"

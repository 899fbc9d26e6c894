"""The live display pull and import share (render/progress.py): its text on a terminal, nothing
on a pipe, nothing before the first event, and each command's own count line."""

from __future__ import annotations

import io
import re

import pytest

from pinctl.imports.run import ImportItem
from pinctl.pull.run import PullItem
from pinctl.render.imports import import_progress
from pinctl.render.progress import live_progress
from pinctl.render.pull import pull_progress

# Cursor moves, line erases, colour: what rich adds around the text of a frame.
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def last_frame(shown: str) -> list[str]:
    """The lines of the frame drawn last. rich redraws on a timer as well, so earlier frames
    depend on timing; the last one is drawn when the display stops, showing the final state. Each
    frame starts after a carriage return, and the cursor is shown again once it is drawn."""
    before_stop = shown.rpartition("\x1b[?25h")[0]
    frame = ESCAPE.sub("", before_stop.rpartition("\r")[2])
    return frame.splitlines()


@pytest.mark.parametrize(("command", "in_flight", "spinners", "count"), [
    # pull: a spinner per reference until it finishes, and how many are in flight.
    ("pull", True, ["b: unpacking"], "pull: 1 done, 1 in flight"),
    # import: one spinner, the archive heard last, kept after it finishes (an archive finishes
    # once per reference it names, and goes on).
    ("import", False, ["b: unpacking"], "import: 1 done"),
])
def test_the_spinners_and_the_count_line(command: str, in_flight: bool, spinners: list[str], count: str) -> None:
    terminal = Terminal()
    with live_progress(command, in_flight=in_flight, stream=terminal) as (heard, finished):
        heard("a", "reading")
        heard("b", "unpacking")
        finished("a" if in_flight else "b")
    lines = last_frame(terminal.getvalue())
    assert [line[2:] for line in lines[:-1]] == spinners and lines[-1] == count


def test_a_key_is_shown_as_visible_text() -> None:
    terminal = Terminal()
    with live_progress("pull", in_flight=True, stream=terminal) as (heard, _finished):
        heard("example.test/a\x1b[2J:1", "pulling")
    assert last_frame(terminal.getvalue())[0][2:] == "example.test/a\\x1b[2J:1: pulling"


def test_nothing_is_drawn_before_the_first_event() -> None:
    terminal = Terminal()
    with live_progress("pull", in_flight=True, stream=terminal) as (_heard, finished):
        finished("example.test/a:1")
    assert terminal.getvalue() == ""


def test_nothing_reaches_a_pipe() -> None:
    for in_flight in (True, False):
        pipe = io.StringIO()
        with live_progress("pull", in_flight=in_flight, stream=pipe) as (heard, finished):
            heard("example.test/a:1", "pulling")
            finished("example.test/a:1")
        assert pipe.getvalue() == ""


def test_each_command_keeps_its_own_text() -> None:
    pulls = Terminal()
    with pull_progress(pulls) as (heard, finished):
        heard("example.test/a:1", "pulling")
        heard("example.test/b:1", "pulling")
        finished(PullItem("example.test/a:1", "k8s.io", "pulled"))
    assert last_frame(pulls.getvalue())[-1] == "pull: 1 done, 1 in flight"
    imports = Terminal()
    with import_progress(imports) as (heard, finished):
        heard("/srv/a.tar", "reading 8.0 MiB of 1.0 GiB")
        finished(ImportItem("/srv/a.tar", "example.test/a:1", "k8s.io", "imported"))
        finished(ImportItem("/srv/a.tar", "example.test/a:2", "k8s.io", "present"))
    assert last_frame(imports.getvalue())[-2][2:] == "/srv/a.tar: reading 8.0 MiB of 1.0 GiB"
    assert last_frame(imports.getvalue())[-1] == "import: 2 done"

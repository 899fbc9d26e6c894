"""Tables: colour only on a terminal and never with NO_COLOR; plain, aligned text for pipes."""

from __future__ import annotations

import io

import pytest

from pinctl import output


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


ROWS = [["k8s.io", "example.test/app:1", "yes"], ["k8s.io", "example.test/a-much-longer-name:2", "no"]]


def test_terminal_gets_colour(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    out = Terminal()
    output.print_table(["NS", "REF", "PINNED"], ROWS, out, highlight={"PINNED": {"yes": "green"}})
    assert "\x1b[" in out.getvalue()


def test_no_color_turns_colour_off_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    out = Terminal()
    output.print_table(["NS", "REF", "PINNED"], ROWS, out, highlight={"PINNED": {"yes": "green"}})
    text = out.getvalue()
    assert "\x1b[3" not in text and "example.test/a-much-longer-name:2" in text


def test_pipe_gets_plain_aligned_columns() -> None:
    out = io.StringIO()
    output.print_table(["NS", "REF", "PINNED"], ROWS, out)
    lines = out.getvalue().splitlines()
    assert "\x1b[" not in out.getvalue()
    assert lines[0].index("PINNED") == lines[1].index("yes") == lines[2].index("no")
    assert all(line == line.rstrip() for line in lines)


def test_a_narrow_terminal_never_cuts_a_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "30")
    out = Terminal()
    output.print_table(["NS", "REF", "PINNED"], ROWS, out)
    assert "example.test/a-much-longer-name:2" in out.getvalue()


@pytest.mark.parametrize("size, text", [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (5 * 1024**3, "5.0 GiB")])
def test_human_size(size: int, text: str) -> None:
    assert output.human_size(size) == text

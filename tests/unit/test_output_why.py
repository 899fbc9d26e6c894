"""WHY in a table: the short thing in a table, the whole in -o wide and JSON, and a row of a
40-character name under 120 columns in a pipe (the table helpers are test_output.py's)."""

from __future__ import annotations

import io
import json

import pytest

from pinctl.model import ImageRow, Reason
from pinctl.render import cells, output
from tests.unit.test_output import LONG_WHY, Terminal, assert_fits, image_row


def test_a_tables_why_says_the_short_thing_and_wide_the_whole() -> None:
    row = image_row("example.test/a:1", [Reason("pattern", "example.test/*", "/etc/pinctl/config.d/50-team.toml:3")])
    assert cells.why(row, wide=False) == "pattern example.test/*"
    assert cells.why(row) == "pattern example.test/* (/etc/pinctl/config.d/50-team.toml:3)"
    row.drift, row.pinned = "unlabelled", False
    assert cells.why(row, wide=False) == "pattern example.test/* not applied: pinctl sync"
    assert cells.why(row) == "pattern example.test/* (/etc/pinctl/config.d/50-team.toml:3), not applied: pinctl sync"
    assert cells.why_brief(row) == "not applied: pinctl sync"
    env = image_row("example.test/a:1", [Reason("pattern", "*a*", "env PINCTL_PINNED_IMAGES")])
    assert cells.why(env, wide=False) == "pattern *a*"


NAME_40 = "registry.example.org/read/tools/alpha:10"


def not_applied_row(name: str, pattern: str) -> ImageRow:
    row = image_row(name, [Reason("pattern", pattern, "/etc/pinctl/config.d/50-platform-team.toml:12")])
    row.drift, row.pinned = "unlabelled", False
    return row


@pytest.mark.parametrize("pattern", ["web:*", "registry.example.org/read/*", NAME_40])
def test_a_40_character_names_row_whose_pattern_is_not_applied_stays_under_120_columns_in_a_pipe(
        pattern: str) -> None:
    """The issue's 171-column row: WHY repeated the pattern and its file. A pipe keeps every value
    whole and stays under 120 columns, WHY taking its brief form when the short one is too long;
    -o wide and JSON say the whole."""
    rows = [not_applied_row(NAME_40, pattern), image_row("example.test/web:1")]
    rows[0].size = 123_456_789  # "117.7 MiB": SIZE at its usual widest
    out = io.StringIO()
    output.print_images(rows, [], "table", False, out)
    lines = out.getvalue().splitlines()
    assert all(len(line) < 120 for line in lines), out.getvalue()
    row = next(line for line in lines if NAME_40 in line)
    assert row.split()[1] == NAME_40 and "not applied: pinctl sync" in row
    short = cells.why(rows[0], wide=False)
    assert row.endswith(short) is (len(row) - len(cells.why_brief(rows[0])) + len(short) < 120)
    wide = io.StringIO()
    output.print_images(rows, [], "wide", False, wide)
    assert cells.why(rows[0]) in wide.getvalue() and "50-platform-team.toml:12" in wide.getvalue()
    data = io.StringIO()
    output.print_images(rows, [], "json", False, data)
    [reason] = json.loads(data.getvalue())["images"][0]["reasons"]
    assert reason == {"kind": "pattern", "detail": pattern, "source": "/etc/pinctl/config.d/50-platform-team.toml:12"}
    assert json.loads(data.getvalue())["images"][0]["drift"] == "unlabelled"


@pytest.mark.parametrize("width", [40, 60, 80, 120])
@pytest.mark.parametrize("name", ["example.test/web/app:1.0", NAME_40,
                                  "registry.example.org/platform/observability/agent-eta:v0.9.1"])
def test_ls_on_a_terminal_never_cuts_a_name_that_fits_the_window(monkeypatch: pytest.MonkeyPatch, width: int,
                                                                  name: str) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    rows = [not_applied_row(name, "registry.example.org/*"), image_row("example.test/other:1", LONG_WHY)]
    out = Terminal()
    output.print_images(rows, [], "table", False, out)
    lines = assert_fits(out.getvalue(), width)
    text = "\n".join(lines)
    if len(name) <= width:
        assert any(line == name or line.startswith(name + " ") for line in lines), text
    else:
        assert any(line.startswith("*") and line.endswith("*") and line[1:-1] in name for line in lines), text
    assert "…" not in text and "pattern registry.example.org/* not applied: pinctl sync" in " ".join(text.split())


def test_why_in_fewest_words_names_each_kind_once() -> None:
    name = "example.test/pause:3.9"
    row = image_row(name, [Reason("label", name), Reason("label", "sha256:" + "3a" * 32), Reason("sandbox", name),
                           Reason("pattern", "*pause*", "env PINCTL_PINNED_IMAGES"),
                           Reason("pattern", "example.test/*", "/etc/pinctl/config.toml:1")])
    assert cells.why_brief(row) == "label; sandbox; pattern"
    other = image_row(name, [Reason("label", "example.test/pause:latest")])
    assert cells.why_brief(other) == "label on another name" and cells.why_brief(image_row(name, [])) == "-"

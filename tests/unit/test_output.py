"""Tables: colour only on a terminal and never with NO_COLOR; plain, aligned text for pipes."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path
from typing import get_args

import pytest

from pinctl import display, model
from pinctl.backends.cri import RuntimeVersion
from pinctl.check.compare import CheckItem, CheckResult
from pinctl.display import visible
from pinctl.model import Descriptor, ImageRow, ItemResult, OutputFormat, Reason
from pinctl.render import cells, output


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
    assert display.human_size(size) == text


# -- names as containerd may hold them --------------------------------------------------------

FORGED = "example.test/evil:1\nk8s.io   example.test/forged:1"
ESCAPE = "example.test/esc\x1b[31m:1"
RTL = "example.test/rtl\u202e:1"


def image_row(ref: str, reasons: list[Reason] | None = None, image_id: str = "sha256:" + "3a" * 32) -> ImageRow:
    target = Descriptor("application/vnd.oci.image.manifest.v1+json", "sha256:" + "d" * 64, 400)
    return ImageRow("k8s.io", ref, image_id, target, 1234, {}, pinned=bool(reasons), reasons=reasons or [])


def test_visible_escapes_what_a_terminal_would_obey() -> None:
    assert visible(FORGED) == "example.test/evil:1\\nk8s.io   example.test/forged:1"
    assert visible(ESCAPE) == "example.test/esc\\x1b[31m:1"
    assert visible(RTL) == "example.test/rtl\\u202e:1"
    assert visible("example.test/café:1") == "example.test/café:1"
    assert visible("example.test/café:1", "ascii") == "example.test/caf\\xe9:1"
    assert visible("example.test/snow\u2603:1", "latin-1") == "example.test/snow\\u2603:1"
    assert visible("example.test/app:1", "ascii") == "example.test/app:1"


def test_a_piped_table_shows_control_characters_escaped_one_row_each() -> None:
    out = io.StringIO()
    output.print_images([image_row(r) for r in ("example.test/app:1", FORGED, ESCAPE, RTL)], [], "table", False, out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 5
    assert "\x1b" not in out.getvalue() and "\u202e" not in out.getvalue()
    assert "evil:1\\nk8s.io" in lines[2] and "esc\\x1b[31m:1" in lines[3] and "rtl\\u202e:1" in lines[4]
    assert all(line.startswith("k8s.io ") for line in lines[1:])


def test_a_terminal_table_shows_control_characters_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    out = Terminal()
    output.print_images([image_row(r) for r in (FORGED, ESCAPE)], [], "table", False, out)
    text = strip_ansi(out.getvalue())
    assert "evil:1\\nk8s.io" in text and "esc\\x1b[31m:1" in text
    assert len(text.splitlines()) == 3


def test_quiet_leaves_out_what_cannot_be_one_exact_line(capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    output.print_images([image_row(r) for r in ("example.test/app:1", FORGED, ESCAPE, "example.test/café:1")], [],
                        "table", True, out)
    assert out.getvalue() == "example.test/app:1\nexample.test/café:1\n"
    [warning] = capsys.readouterr().err.splitlines()
    assert "2 names hold control characters" in warning and "-o json" in warning


def test_quiet_leaves_out_what_the_encoding_cannot_write(capsys: pytest.CaptureFixture[str]) -> None:
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="ascii")
    output.print_names(["example.test/app:1", "example.test/café:1"], out)
    out.flush()
    assert raw.getvalue() == b"example.test/app:1\n"
    err = capsys.readouterr().err
    assert "1 name holds" in err and "(ascii)" in err


def test_an_ascii_output_lists_every_name_escaped() -> None:
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="ascii")
    output.print_images([image_row(r) for r in ("example.test/café:1", "example.test/snow\u2603:1")], [], "table",
                        False, out)
    out.flush()
    text = raw.getvalue().decode("ascii")
    assert "example.test/caf\\xe9:1" in text and "example.test/snow\\u2603:1" in text


def test_json_keeps_names_exact_and_ascii() -> None:
    out = io.StringIO()
    output.print_images([image_row(r) for r in (FORGED, "example.test/café:1")], [], "json", False, out)
    assert out.getvalue().isascii()
    assert [image["ref"] for image in json.loads(out.getvalue())["images"]] == [FORGED, "example.test/café:1"]


def test_warnings_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    output.warn(f"pin {FORGED}: failed")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\\n" in err


def test_watch_text_log_lines_stay_one_line() -> None:
    from pinctl.render.log import Log

    stream = io.StringIO()
    Log("text", stream)("info", "pinned", namespace="k8s.io", ref=FORGED)
    Log("text", stream)("info", "pinned", namespace="k8s.io", ref=ESCAPE)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "\x1b" not in stream.getvalue()
    assert "ref=example.test/evil:1\\nk8s.io" in lines[0] and "ref=example.test/esc\\x1b[31m:1" in lines[1]
    json_stream = io.StringIO()
    Log("json", json_stream)("info", "pinned", ref=FORGED)
    assert json.loads(json_stream.getvalue())["ref"] == FORGED


# -- a terminal of 80 columns ------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;]*m")
LONG_WHY = [Reason("pattern", "example.test/platform/base/*", "/etc/pinctl/config.d/50-platform-team.toml:12"),
            Reason("pattern", "*base*", "env PINCTL_PINNED_IMAGES")]


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def assert_fits(text: str, width: int = 80) -> list[str]:
    lines = strip_ansi(text).splitlines()
    assert lines and all(len(line) <= width for line in lines), "\n".join(lines)
    assert all(line.strip() and line == line.rstrip() for line in lines), "\n".join(lines)
    return lines


def ls_rows() -> list[ImageRow]:
    digest_ref = "sha256:" + "3a" * 32
    return [image_row("example.test/base/app:1", LONG_WHY), image_row(digest_ref, LONG_WHY),
            image_row("example.test/other:1")]


def test_ls_fits_an_80_column_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = Terminal()
    output.print_images(ls_rows(), [], "table", False, out, id_refs=True)
    lines = assert_fits(out.getvalue())
    # One namespace: a heading, not a column that says k8s.io on every row.
    assert lines[0] == "NAMESPACE: k8s.io" and lines[1].split()[0] == "REF"
    assert lines[2].startswith("example.test/base/app:1  ")
    assert "sha256:3a3a3a3a3a3a…" in out.getvalue() and "3a" * 32 not in out.getvalue()
    # WHY whole, on indented lines under its row, never cut to a stub.
    assert "…" not in strip_ansi(out.getvalue()).replace("sha256:3a3a3a3a3a3a…", "")
    assert " ".join(" ".join(lines).split()).count("pattern example.test/platform/base/*; pattern *base*") == 2
    assert "50-platform-team.toml" not in out.getvalue()  # where a pattern was written: -o wide
    assert lines[-1].startswith("example.test/other:1 ") and lines[-1].endswith(" -")


def test_ls_in_two_namespaces_keeps_its_namespace_column(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    rows = ls_rows()
    rows[2].namespace = "moby"
    out = Terminal()
    output.print_images(rows, [], "table", False, out)
    lines = assert_fits(out.getvalue())
    assert lines[0].split()[:2] == ["NAMESPACE", "REF"] and lines[-1].startswith("moby ")


def test_ls_on_a_wide_terminal_is_not_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    out = Terminal()
    output.print_images(ls_rows(), [], "table", False, out)
    text = strip_ansi(out.getvalue())
    assert "…" not in text.replace("sha256:3a3a3a3a3a3a…", "")
    assert cells.why(ls_rows()[0], wide=False) in text and text.startswith("NAMESPACE ")  # room for it: no fold


def test_ls_wide_on_a_terminal_shows_everything_unpadded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = Terminal()
    output.print_images(ls_rows(), [], "wide", False, out, id_refs=True)
    lines = strip_ansi(out.getvalue()).splitlines()
    assert len(lines) == 4 and all(line == line.rstrip() for line in lines)
    assert "sha256:" + "3a" * 32 in lines[2] and cells.why(ls_rows()[0]) in lines[1]


def test_ls_in_a_pipe_keeps_full_values() -> None:
    out = io.StringIO()
    output.print_images(ls_rows(), [], "table", False, out, id_refs=True)
    lines = out.getvalue().splitlines()
    assert lines[2].split()[1] == "sha256:" + "3a" * 32
    # The sha256: reference's 71 cells leave WHY too little of 120 columns: its brief form.
    assert lines[1].endswith("   " + cells.why_brief(ls_rows()[0])) and cells.why_brief(ls_rows()[0]) == "pattern"
    assert "…" not in out.getvalue()


LONG_REF = "registry.example.test/team-platform/very-long-component-name/ingress-controller:v1.2.3-rc.1"


@pytest.mark.parametrize("width", [80, 100, 120])
def test_a_long_reference_is_never_shortened(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    """92 cells: at 100 and 120 the name is whole on its row once the figures left and WHY went
    under it; at 80, wider than the window alone, it has a line of its own, cut into a pattern
    that names it and no other image, and its row goes on under it."""
    monkeypatch.setenv("COLUMNS", str(width))
    out = Terminal()
    output.print_images([image_row(LONG_REF), image_row("example.test/other:1")], [], "table", False, out)
    lines = assert_fits(out.getvalue(), width)
    assert "IMAGE ID" not in lines[1]
    if width > len(LONG_REF):
        assert any(line.split()[0] == LONG_REF for line in lines) and "…" not in out.getvalue()
    else:
        assert lines[2].startswith("*") and lines[2].endswith("ingress-controller:v1.2.3-rc.1*")
        assert lines[2][1:-1] in LONG_REF and lines[3].split() == ["no", "-"]
    assert lines[-1].split()[0] == "example.test/other:1"


@pytest.mark.parametrize("switches", [{}, {"show_drift": True}, {"show_cri": True},
                                      {"show_drift": True, "show_cri": True}])
@pytest.mark.parametrize("width", [80, 120])
def test_every_ls_switch_fits(monkeypatch: pytest.MonkeyPatch, width: int, switches: dict[str, bool]) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    rows = [*ls_rows(), image_row(LONG_REF, LONG_WHY)]
    rows[0].drift, rows[0].cri_pinned = "unlabelled", False
    out = Terminal()
    output.print_images(rows, [], "table", False, out, **switches)
    lines = assert_fits(out.getvalue(), width)
    if switches.get("show_drift"):
        assert "DRIFT" in lines[1] and "no label" in out.getvalue()


def test_ellipsis_is_ascii_where_the_terminal_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    raw = io.BytesIO()

    class AsciiTerminal(io.TextIOWrapper):
        def isatty(self) -> bool:
            return True

    out = AsciiTerminal(raw, encoding="ascii")
    output.print_images([*ls_rows(), image_row(LONG_REF)], [], "table", False, out, id_refs=True)
    out.flush()
    text = raw.getvalue().decode("ascii")
    assert "sha256:3a3a3a3a3a3a..." in text and "ingress-controller:v1.2.3-rc.1*" in text
    assert_fits(text)


def test_config_show_fits_without_breaking_a_word(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from pinctl.config import loader

    monkeypatch.setenv("COLUMNS", "80")
    (tmp_path / "config.toml").write_text('pinned_images = ["example.test/alpha:*"]\n')
    env = {"CONTAINERD_ADDRESS": "/tmp/pinctl-sandbox/s/containerd.sock",
           "PINCTL_CONTAINERD_CONFIG": "/tmp/pinctl-sandbox/containerd.toml",
           "CONTAINER_RUNTIME_ENDPOINT": "unix:///tmp/pinctl-sandbox/s/containerd.sock"}
    cfg = loader.load({}, env, config_path=str(tmp_path / "config.toml"))
    out = Terminal()
    output.print_config(cfg, "table", out)
    lines = assert_fits(out.getvalue())
    text = " ".join(strip_ansi(out.getvalue()).split())
    for word in ("CONTAINERD_ADDRESS", "PINCTL_CONTAINERD_CONFIG", "CONTAINER_RUNTIME_ENDPOINT"):
        assert f"env {word}" in text, lines


def check_result(bad: int = 1) -> CheckResult:
    items = [CheckItem("sha256:" + "b" * 64, ["example.test/base/app:1"], True, False,
                       cause="pattern known only to pinctl: containerd reads labels, not patterns",
                       fix="pinctl sync (or pinctl config export --for containerd)") for _ in range(bad)]
    items.append(CheckItem("sha256:" + "c" * 64, ["example.test/other:1"], False, False))
    return CheckResult("unix:///run/containerd/containerd.sock", RuntimeVersion("containerd", "1.7.24", "v1"), items)


def test_check_on_a_terminal_gives_cause_and_fix_whole_lines(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = Terminal()
    output.print_check(check_result(), "table", out)
    lines = assert_fits(out.getvalue())
    assert lines[0].split() == ["IMAGE", "IMAGE", "ID", "WANTED", "CRI", "PINNED"]
    assert lines[1].split() == ["example.test/base/app:1", "b" * 12, "yes", "no"]
    joined = " ".join(line.strip() for line in lines[2:])
    assert "cause: pattern known only to pinctl: containerd reads labels, not patterns" in joined
    assert "fix:   pinctl sync (or pinctl config export --for containerd)" in joined
    assert "disagree on 1 of 2 images" in capsys.readouterr().err


def test_check_folds_a_long_cause_under_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    out = Terminal()
    output.print_check(check_result(), "table", out)
    lines = assert_fits(out.getvalue(), 60)
    cause = [i for i, line in enumerate(lines) if line.startswith("  cause: ")][0]
    assert lines[cause + 1].startswith(" " * len("  cause: ")) and lines[cause + 1].strip()


def test_check_in_a_pipe_keeps_its_columns() -> None:
    out = io.StringIO()
    output.print_check(check_result(), "table", out)
    lines = out.getvalue().splitlines()
    assert lines[0].split()[-2:] == ["CAUSE", "FIX"] and len(lines) == 2
    assert lines[1].endswith("pinctl sync (or pinctl config export --for containerd)")


def test_check_verdict_says_how_long_it_waited(capsys: pytest.CaptureFixture[str]) -> None:
    output.print_check(check_result(0), "table", io.StringIO(), waited=3.24)
    assert capsys.readouterr().err.rstrip().endswith("agree (after 3.2 s)")
    output.print_check(check_result(0), "table", io.StringIO())
    assert "after" not in capsys.readouterr().err


def test_check_progress_is_silent_off_a_terminal() -> None:
    err = io.StringIO()
    with output.check_progress(stream=err) as progress:
        progress(check_result(2), 12.0)
    assert err.getvalue() == ""


def test_check_progress_on_a_terminal_is_transient(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")
    err = Terminal()
    with output.check_progress(stream=err) as progress:
        progress(check_result(2), 12.0)
        time.sleep(0.3)  # rich redraws the line on its own thread
    text = err.getvalue()
    assert "2 images disagree" in text and "12 s left" in text
    assert "\x1b[2K" in text  # the line is erased at the end


# -- pin, unpin, sync results ------------------------------------------------------------------

FAILED = ItemResult("", "nothing.example/x:1", "failed", "no image matches nothing.example/x:1 in k8s.io")
RESULTS = [ItemResult("k8s.io", "example.test/app:1", "pinned"), ItemResult("k8s.io", "example.test/b:1", "already-pinned")]


def test_a_failure_shows_once_on_a_terminal(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = Terminal()
    output.print_results("pin", [*RESULTS, FAILED], "partial", False, "table", False, out)
    err = capsys.readouterr().err
    screen = strip_ansi(out.getvalue()) + err
    assert screen.count("no image matches") == 1
    assert "  error: no image matches nothing.example/x:1 in k8s.io" in out.getvalue()
    assert err.strip() == "pinctl: pin: 1 pinned, 1 already pinned, 1 failed"


def test_a_lone_failure_on_a_terminal_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """pin epsilon:3.1 with no such image: the error alone, not a table, a note and a summary."""
    monkeypatch.setenv("COLUMNS", "80")
    out = Terminal()
    output.print_results("pin", [FAILED], "error", False, "table", False, out)
    assert out.getvalue() == ""
    assert capsys.readouterr().err.splitlines() == ["pinctl: pin nothing.example/x:1: no image matches "
                                                    "nothing.example/x:1 in k8s.io"]


def test_a_failure_in_a_pipe_is_also_said_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    output.print_results("pin", [*RESULTS, FAILED], "partial", False, "table", False, out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["ACTION", "NAMESPACE", "REF", "ERROR"]
    assert lines[-1].endswith("no image matches nothing.example/x:1 in k8s.io")
    assert "pin nothing.example/x:1: no image matches" in capsys.readouterr().err


@pytest.mark.parametrize("terminal", [False, True])
def test_no_error_column_without_a_failure(terminal: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out: io.StringIO = Terminal() if terminal else io.StringIO()
    output.print_results("pin", RESULTS, "success", False, "table", False, out)
    assert strip_ansi(out.getvalue()).splitlines()[0].split() == ["ACTION", "NAMESPACE", "REF"]


def test_one_vocabulary_for_table_and_summary(capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    output.print_results("sync", RESULTS, "success", True, "table", False, out)
    actions = [line.split("   ")[0] for line in out.getvalue().splitlines()[1:]]
    assert actions == ["would be pinned", "already pinned"]
    assert capsys.readouterr().err.strip() == "pinctl: sync (dry run): 1 would be pinned, 1 already pinned"
    output.print_results("sync", RESULTS, "success", False, "table", False, io.StringIO())
    assert capsys.readouterr().err.strip() == "pinctl: sync: 1 pinned, 1 already pinned"


def test_json_action_values_are_unchanged() -> None:
    out = io.StringIO()
    output.print_results("sync", RESULTS, "success", True, "json", False, out)
    assert [r["action"] for r in json.loads(out.getvalue())["results"]] == ["pinned", "already-pinned"]


def test_every_value_of_a_vocabulary_has_its_words() -> None:
    """A new action, reason kind or drift needs its place in the summary, WHY or DRIFT column."""
    assert sorted(output.ACTION_ORDER) == sorted(get_args(model.Action))
    assert sorted(cells.DRIFT_TEXT) == sorted(cells.DRIFT_BRIEF) == sorted(get_args(model.Drift))


def test_wide_keeps_full_references_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    digest_ref = "sha256:" + "3a" * 32
    cases: tuple[tuple[OutputFormat, bool], ...] = (("table", False), ("wide", True))
    for fmt, full in cases:
        out = Terminal()
        output.print_results("unpin", [ItemResult("k8s.io", digest_ref, "unpinned")], "success", False, fmt, False, out)
        assert (digest_ref in out.getvalue()) is full


def pattern_row(ref: str, drift: model.Drift | None, image_id: str) -> ImageRow:
    row = image_row(ref, [Reason("pattern", "example.test/*", "/etc/pinctl/config.toml:1")], image_id)
    row.drift, row.pinned = drift, drift is None
    return row


def test_a_pattern_nothing_pins_yet_says_so_in_why_and_once_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    pending = pattern_row("example.test/a:1", "unlabelled", "sha256:" + "aa" * 32)
    also = pattern_row("sha256:" + "aa" * 32, "unlabelled", "sha256:" + "aa" * 32)  # the same image
    applied = pattern_row("example.test/b:1", None, "sha256:" + "bb" * 32)
    assert cells.why(pending) == "pattern example.test/* (/etc/pinctl/config.toml:1), not applied: pinctl sync"
    assert cells.why(applied) == "pattern example.test/* (/etc/pinctl/config.toml:1)"
    out = io.StringIO()
    output.print_images([pending, also, applied], [], "table", False, out)
    lines = out.getvalue().splitlines()
    assert "not applied: pinctl sync" in next(line for line in lines if " example.test/a:1 " in line)
    err = capsys.readouterr().err
    assert err == "pinctl: 1 image is covered by a pattern but not pinned yet: pinctl sync pins them (ls --drift lists them)\n"


@pytest.mark.parametrize("fmt, quiet", [("json", False), ("table", True)])
def test_the_not_applied_line_stays_out_of_json_and_names(fmt: OutputFormat, quiet: bool,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    output.print_images([pattern_row("example.test/a:1", "unlabelled", "sha256:" + "aa" * 32)], [], fmt, quiet, out)
    assert capsys.readouterr().err == ""
    if fmt == "json":
        [row] = json.loads(out.getvalue())["images"]
        assert row["reasons"] == [{"kind": "pattern", "detail": "example.test/*", "source": "/etc/pinctl/config.toml:1"}]


def test_a_containerd_entry_containerd_has_not_read_says_so() -> None:
    entry = Reason("containerd-config", "pinned_images.app in /etc/containerd/conf.d/10.toml:4")
    row = image_row("example.test/app:1", [entry])
    assert cells.why(row) == entry.detail and cells.not_applied([row]) == ""
    row.pinned = False
    assert cells.why(row) == f"{entry.detail}, not applied: restart containerd"
    assert "1 image is named in containerd's pinned_images but not pinned yet" in cells.not_applied([row])


def test_a_table_shows_an_images_names_and_its_id_reference_only_when_alone_or_asked() -> None:
    lone = image_row("sha256:" + "5b" * 32, image_id="sha256:" + "5b" * 32)  # an image with no name
    rows = [*ls_rows(), lone]
    out = io.StringIO()
    output.print_images(rows, [], "table", False, out)
    refs = [line.split()[1] for line in out.getvalue().splitlines()[1:]]
    assert refs == ["example.test/base/app:1", "example.test/other:1", "sha256:" + "5b" * 32]
    shown = io.StringIO()
    output.print_images(rows, [], "table", False, shown, id_refs=True)
    assert len(shown.getvalue().splitlines()) == 5
    data = io.StringIO()
    output.print_images(rows, [], "json", False, data)  # JSON: every reference, always
    assert len(json.loads(data.getvalue())["images"]) == 4


def test_a_piped_row_of_a_40_character_name_stays_under_120_columns() -> None:
    name = "example.test/team-platform/ingress-ctl:1"
    assert len(name) == 40
    rows = [image_row(name, [Reason("label", name)]), image_row("sha256:" + "3a" * 32, [Reason("label", name)])]
    out = io.StringIO()
    output.print_images(rows, [], "table", False, out)
    assert max(len(line) for line in out.getvalue().splitlines()) < 120, out.getvalue()


def test_ls_names_each_filter_that_matches_no_image() -> None:
    from pinctl.pins.listing import unmatched_terms

    rows = [image_row("docker.io/library/tools:1"), image_row("example.test/app:1")]
    assert unmatched_terms(rows, ["tools:1", "example.test/app:1", "epsilon:3.1", "*nothing*", "sha256:ffff"]) == [
        "epsilon:3.1 (docker.io/library/epsilon:3.1)", "*nothing*", "sha256:ffff"]


def test_sync_prunes_pins_and_says_unpinned_not_pruned() -> None:
    """pinctl prune deletes images; sync --prune only takes pins back, and its rows say that."""
    assert output.action_text("pruned", dry_run=True) == "would be unpinned (no pattern)"
    assert output.action_text("pruned", dry_run=False) == "unpinned (no pattern)"


def test_at_60_columns_names_stay_whole_and_apart_before_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """team/alpha and tools/alpha must not both read 'localhos…/…/alpha:1.0'."""
    monkeypatch.setenv("COLUMNS", "60")
    names = ["localhost:5000/team/alpha:1.0", "localhost:5000/tools/alpha:1.0", "example.test/epsilon:3.1"]
    out = Terminal()
    output.print_images([image_row(name) for name in names], [], "table", False, out)
    lines = assert_fits(out.getvalue(), 60)
    assert [line.split()[0] for line in lines[2:]] == names
    assert "IMAGE ID" not in lines[1]

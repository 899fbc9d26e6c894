"""How a terminal table gives way: references shortened in the middle, sentences wrapped at
their words, and the steps of render.table.give_way taken in their order, each only as far as
the table needs."""

from __future__ import annotations

import pytest

from pinctl.render import shape, table

LONG = "registry.example.test/team-platform/very-long-component-name/ingress-controller:v1.2.3-rc.1"
NAME_24 = "example.test/web/app:1.0"
NAME_40 = "registry.example.org/read/tools/alpha:10"
NAME_60 = "registry.example.org/platform/observability/agent-eta:v0.9.1"


@pytest.mark.parametrize(("width", "shown"), [
    (200, LONG),
    (68, "registry.example.test/team-platform/…/ingress-controller:v1.2.3-rc.1"),
    (60, "registry.example.test/…/ingress-controller:v1.2.3-rc.1"),
    (45, "registry.ex…/…/ingress-controller:v1.2.3-rc.1"),
    (30, "…/ingress-control…:v1.2.3-rc.1"),
])
def test_a_reference_keeps_its_registry_and_last_part_as_long_as_it_can(width: int, shown: str) -> None:
    assert shape.shorten_ref(LONG, width, "…") == shown
    assert shape.cells(shown) <= width


def test_a_digest_is_cut_to_twelve_hex_digits_first() -> None:
    ref = "example.test/team/app@sha256:" + "ab" * 32
    assert shape.shorten_ref(ref, 60, "…") == "example.test/team/app@sha256:" + "ab" * 6 + "…"


@pytest.mark.parametrize("width", range(8, 90))
def test_a_shortened_reference_always_fits(width: int) -> None:
    assert shape.cells(shape.shorten_ref(LONG, width, "...")) <= width


def test_wrapping_breaks_at_words_then_after_separators() -> None:
    text = "pattern example.test/alpha:* (/tmp/pinctl-sandbox/config.toml:1)"
    assert shape.wrap(text, 30, 30) == ["pattern example.test/alpha:*", "(/tmp/pinctl-sandbox/", "config.toml:1)"]
    # A word that fits a whole continuation line goes there rather than being broken.
    assert shape.wrap(text, 12, 76) == ["pattern", "example.test/alpha:* (/tmp/pinctl-sandbox/config.toml:1)"]
    assert shape.wrap("label", 16, 76) == ["label"]
    # Too narrow for even the first word: the text starts on the wider line.
    assert shape.wrap("ineffective label", 5, 40) == ["", "ineffective label"]


def test_the_widest_word_is_the_narrowest_a_column_wraps_to() -> None:
    assert shape.widest_token(["env CONTAINERD_ADDRESS", "/tmp/a/containerd.sock"]) == len("CONTAINERD_ADDRESS")


HEADERS = ["NAMESPACE", "REF", "IMAGE ID", "WHY"]
FIT = table.give_way("REF", "WHY", fold=["NAMESPACE"])


def rows(ref: str = "example.test/app:1", why: str = "label", namespaces: tuple[str, ...] = ("k8s.io",)) -> list[list[str]]:
    return [[namespace, ref, "3ab413910e19", why] for namespace in namespaces]


def test_a_table_that_fits_gives_nothing_away() -> None:
    layout = table.lay_out(HEADERS, rows(), 80, FIT)
    assert layout.columns == [0, 1, 2, 3] and layout.headings == []


def test_the_namespace_folds_first_and_only_when_all_rows_share_it() -> None:
    why = "pattern example.test/* (/etc/pinctl/config.d/50-team.toml:3)"
    folded = table.lay_out(HEADERS, rows(why=why), 80, FIT)
    assert folded.headings == ["NAMESPACE: k8s.io"] and 0 not in folded.columns
    assert folded.widths[1] == len("example.test/app:1")  # REF untouched: WHY had room enough
    kept = table.lay_out(HEADERS, rows(why=why, namespaces=("k8s.io", "moby")), 80, FIT)
    assert kept.headings == [] and 0 in kept.columns


def test_why_gives_way_and_the_reference_stays_whole() -> None:
    layout = table.lay_out(HEADERS, rows(ref=NAME_60, why="pattern *ingress* (env PINCTL_PINNED_IMAGES)"), 120, FIT)
    ref, why = layout.widths[1], layout.widths[3]
    assert ref == len(NAME_60) and not layout.folded
    assert ref + why + len("3ab413910e19") + 2 * table.GAP == 120  # nothing wasted, nothing over


def test_a_name_wider_than_the_row_leaves_folds_its_row_and_a_name_wider_than_the_window_is_cut() -> None:
    """LONG (92 cells) at 80 columns: no row has room for it, so it goes on a line of its own,
    cut into a pattern, and the rest of its row under it."""
    why = "pattern *ingress* (/etc/pinctl/config.d/50-platform-team.toml:12); pattern *platform* (env PINCTL_PINNED_IMAGES)"
    layout = table.lay_out(HEADERS, rows(ref=LONG, why=why), 80, FIT)
    assert layout.fold_all and layout.folded == {0} and 1 not in layout.columns
    assert sum(layout.widths[i] for i in layout.columns) + table.GAP * (len(layout.columns) - 1) + table.HANG <= 80
    assert shape.NameCuts([LONG], 80).lines(LONG) == ["*" + LONG[-78:] + "*"]


def test_fixed_columns_never_shrink() -> None:
    layout = table.lay_out(["A", "B"], [["x" * 50, "y" * 50]], 60, table.NO_FIT)
    assert layout.widths == {0: 50, 1: 50}  # the terminal wraps what cannot give way


CRI_HEADERS = ["REF", "IMAGE ID", "SIZE", "PINNED", "CRI PINNED", "WHY"]
POLICY_WHY = "pattern example.test/alpha:* (/tmp/pinctl-sandbox/config.toml:1)"


def cri_rows(*whys: str) -> list[list[str]]:
    refs = ["localhost:5000/team/alpha:1.0", "example.test/pause:3.9", "localhost:5000/tools/zeta:0.9"]
    return [[ref, "3ab413910e19", "1.3 KiB", "yes", "no", why] for ref, why in zip(refs, whys)]


def test_a_one_word_why_stays_on_its_row_when_the_others_hang() -> None:
    """ls --cri at 80 columns: 'sandbox' has its row even though the long WHYs go on under theirs,
    and every reference is whole."""
    layout = table.lay_out(CRI_HEADERS, cri_rows(POLICY_WHY, "sandbox", "-"), 81, table.give_way("REF", "WHY"))
    assert layout.hang and layout.widths[5] >= len("sandbox")
    assert layout.widths[0] == len("localhost:5000/team/alpha:1.0") and not layout.folded
    assert sum(layout.widths.values()) + table.GAP * 5 <= 81


def test_a_one_word_why_goes_under_its_row_before_a_name_folds() -> None:
    layout = table.lay_out(CRI_HEADERS, cri_rows(POLICY_WHY, "sandbox", "-"), 78, table.give_way("REF", "WHY"))
    assert not layout.folded and layout.widths[0] == len("localhost:5000/team/alpha:1.0")
    assert layout.widths[5] < len("sandbox")


def test_a_short_why_that_does_not_fit_its_row_goes_whole_under_it() -> None:
    # Split, it takes the same two lines and reads worse: "label;" on the row, "sandbox" alone under it.
    assert table.hung("label; sandbox", 9, 80) == ["", "label; sandbox"]
    assert table.hung("label", 9, 80) == ["label"]
    # Starting on the row saves a line: it does.
    long = "label on example.test/beta:2.0; pattern *beta* (/tmp/pinctl-sandbox/config.toml:1)"
    assert table.hung(long, 9, 80)[0] == "label on"


def test_a_reference_is_never_squeezed_a_path_is() -> None:
    """Past every step the table may still be too wide (fixed columns): the path gives, the
    reference's row folds rather than show '…/…a:1.0'."""
    fit = table.give_way("REF", "WHY", paths=["ARCHIVE"])
    headers = ["ARCHIVE", "REF", "RESULT", "FIXED", "WHY"]
    row = ["/var/lib/pinctl/images/agent.tar", "localhost:5000/tools/zeta:0.9", "present, already pinned", "x" * 30, ""]
    layout = table.lay_out(headers, [row], 80, fit)
    assert layout.fold_all and 1 not in layout.columns
    assert table.SQUEEZE_MIN <= layout.widths[0] <= table.REF_FLOOR


def test_a_column_empty_on_every_row_takes_no_space() -> None:
    fit = table.give_way("REF", "WHY")
    assert table.lay_out(["REF", "RESULT", "WHY"], [["example.test/app:1", "imported", ""]], 80, fit).columns == [0, 1]
    assert table.lay_out(["REF", "RESULT", "WHY"], [["example.test/app:1", "failed", "x"]], 80, fit).columns == [0, 1, 2]


LS_HEADERS = ["NAMESPACE", "REF", "IMAGE ID", "SIZE", "PINNED", "WHY"]
LONG_WHY = ("pattern registry.example.org/* not applied: pinctl sync; ineffective label "
            "io.cri-containerd.pinned=true: the value must be 'pinned'")
# Shares its last 40 cells with NAME_60: a cut that kept only the end would name both.
TWIN_60 = "registry.example.net/platform/observability/agent-eta:v0.9.1"


def ls_table(names: list[str]) -> list[list[str]]:
    return [["k8s.io", name, "3ab413910e19", "1.3 KiB", "no", LONG_WHY] for name in names]


def drawn(headers: list[str], rows: list[list[str]], width: int, fit: table.Fit,
          monkeypatch: pytest.MonkeyPatch, brief: dict[str, list[str]] | None = None) -> list[str]:
    import io
    import re

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setenv("NO_COLOR", "1")
    out = Terminal()
    table.draw(headers, rows, out, fit, brief=brief)
    return re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue()).splitlines()


@pytest.mark.parametrize("width", [40, 60, 80, 120])
@pytest.mark.parametrize("names", [[NAME_24], [NAME_40], [NAME_60], [NAME_24, NAME_40, NAME_60, TWIN_60]],
                         ids=["24", "40", "60", "mixed"])
def test_a_name_is_whole_or_its_row_folds_and_only_a_name_wider_than_the_window_is_cut(
        width: int, names: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from pinctl.render.columns import LS_FIT

    rows = ls_table(names)
    lines = drawn(LS_HEADERS, rows, width, LS_FIT, monkeypatch)
    shown = "\n".join(lines)
    assert all(shape.cells(line) <= width and line == line.rstrip() for line in lines), shown
    for name in names:
        if len(name) <= width:
            # Whole, at the start of its row or of its own line.
            assert any(line == name or line.startswith(name + "  ") for line in lines), (name, shown)
        else:
            # Cut into a pattern that names it and no other name of the table.
            [cut] = [line for line in lines if line.startswith("*") and line.endswith("*") and line[1:-1] in name]
            assert not any(line[1:-1] in other for other in names if other != name for line in [cut]), shown
            assert shape.cells(cut) <= width
    # WHY is never cut: every word of it is there, in order.
    assert "".join(shown.split()).count("".join(LONG_WHY.split())) == len(names), shown
    # A row folds only when even WHY at its narrowest (its header) leaves the name no room.
    layout = table.lay_out(LS_HEADERS, rows, width, LS_FIT)
    others = [i for i in layout.columns if i not in (1, 5)]  # WHY may leave the row lines altogether
    at_least = sum(layout.widths[i] for i in others) + table.GAP * len(others)
    for n in layout.folded:
        assert len(rows[n][1]) + at_least > width, (n, layout)
    if not layout.folded:
        assert 1 in layout.columns and layout.widths[1] == max(len(name) for name in names)


@pytest.mark.parametrize("width", [60, 80, 120])
def test_history_keeps_a_24_cell_name_whole(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's report: at 60 columns history took two cells off a 24-cell name while WHY went
    under its row. Now WHY goes under first (all of it, at 60) and the name stays whole on its
    row; at 40 the row cannot hold it with its other columns, and folds."""
    from pinctl.render.history import HISTORY_FIT

    headers = ["TIME", "IMAGE", "WANTED", "PINNED", "DELETER", "WHY"]
    rows = [["2026-12-06 17:03:12", NAME_24, "pattern example.test/web/*", "label", "kubelet",
             "the kubelet's image GC: cri-proxy saw its RemoveImage"]]
    brief = {"TIME": ["17:03"], "WANTED": ["pattern"], "PINNED": ["label"], "DELETER": ["kubelet"]}
    layout = table.lay_out(headers, rows, width, HISTORY_FIT, brief)
    assert not layout.folded and layout.widths[1] == len(NAME_24), layout
    lines = drawn(headers, rows, width, HISTORY_FIT, monkeypatch, brief)
    assert any(line.startswith("2026-12-06 17:03:12  " + NAME_24 + "  ") or line.startswith("17:03  " + NAME_24)
               for line in lines), lines
    assert table.lay_out(headers, rows, 40, HISTORY_FIT, brief).folded == {0}


def test_a_cut_keeps_as_much_of_the_end_as_names_the_image_alone() -> None:
    assert shape.NameCuts([NAME_60], 40).lines(NAME_60) == ["*" + NAME_60[-38:] + "*"]
    [cut] = shape.NameCuts([NAME_60, TWIN_60], 40).lines(NAME_60)
    assert cut.startswith("*") and cut.endswith("*") and len(cut) <= 40
    assert cut[1:-1] in NAME_60 and cut[1:-1].lower() not in TWIN_60.lower()
    # Two names alike but for their very middle, too long for any cut to tell apart: whole, on lines.
    a, b = "x" * 30 + "a" + "y" * 30, "x" * 30 + "b" + "y" * 30
    lines = shape.NameCuts([a, b, "x" * 29 + "a" + "y" * 31, "x" * 31 + "a" + "y" * 29], 20).lines(a)
    assert "".join(lines) == a and all(len(line) <= 20 for line in lines)
    assert shape.NameCuts([NAME_24], 40).lines(NAME_24) == [NAME_24]


def test_gc_and_prune_tables_say_pin_label_not_the_name_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept image's WHY beside its own name: "pin label", the whole with -o wide and in JSON."""
    import io
    import json

    from pinctl.gc.plan import PruneItem
    from pinctl.render import gc as gc_output
    from pinctl.render.cells import short_why

    why = f"pinctl wants it kept (pin label on {NAME_40}; pattern registry.example.org/*)"
    items = [PruneItem("containerd", "sha256:" + "a" * 64, (NAME_40,), "kept", 1024, why)]
    wide, piped, data = io.StringIO(), io.StringIO(), io.StringIO()
    gc_output.print_prune(items, False, "wide", wide)
    gc_output.print_prune(items, False, "table", piped)  # the table shows kept images with -o wide only
    gc_output.print_prune(items, False, "json", data)
    assert why in wide.getvalue() and piped.getvalue() == ""
    assert json.loads(data.getvalue())["results"][0]["why"] == why
    assert short_why(why, NAME_40) == "pinctl wants it kept (pin label; pattern registry.example.org/*)"
    removed = [PruneItem("containerd", "sha256:" + "b" * 64, (NAME_40,), "failed", 1024, f"pin label on {NAME_40}")]
    gc_output.print_prune(removed, False, "table", piped)
    row = next(line for line in piped.getvalue().splitlines() if NAME_40 in line)
    assert row.endswith("   pin label") and len(row) < 120


def test_a_name_in_the_last_column_folds_only_the_rows_that_need_it() -> None:
    """pin's results: ACTION NAMESPACE REF. The name column is the last and takes what is left."""
    rows = [["pinned", "k8s.io", NAME_24], ["pinned", "k8s.io", NAME_40], ["pinned", "moby", NAME_60]]
    layout = table.lay_out(["ACTION", "NAMESPACE", "REF"], rows, 60, table.give_way("REF"))
    assert layout.folded == {2} and layout.widths[2] == 60 - 6 - 9 - 2 * table.GAP
    assert table.lay_out(["ACTION", "NAMESPACE", "REF"], rows, 80, table.give_way("REF")).folded == set()


def test_config_show_folds_a_key_rather_than_overflow(monkeypatch: pytest.MonkeyPatch) -> None:
    from pinctl.render.output import CONFIG_FIT

    rows = [["docker_pinned_image_labels", "(none)", "default"],
            ["containerd_address", "/run/containerd/containerd.sock", "env CONTAINERD_ADDRESS"]]
    lines = drawn(["KEY", "VALUE", "SOURCE"], rows, 40, CONFIG_FIT, monkeypatch)
    assert all(len(line) <= 40 for line in lines) and "docker_pinned_image_labels" in lines, lines

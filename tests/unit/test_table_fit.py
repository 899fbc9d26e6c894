"""How a terminal table gives way: references shortened in the middle, sentences wrapped at
their words, and the steps of render.table.give_way taken in their order, each only as far as
the table needs."""

from __future__ import annotations

import pytest

from pinctl.render import shape, table

LONG = "registry.example.test/team-platform/very-long-component-name/ingress-controller:v1.2.3-rc.1"


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


def test_why_gives_way_before_a_reference_and_gets_what_is_left() -> None:
    layout = table.lay_out(HEADERS, rows(ref=LONG, why="pattern *ingress* (env PINCTL_PINNED_IMAGES)"), 120, FIT)
    ref, why = layout.widths[1], layout.widths[3]
    assert why >= table.LAST_COMFORT and ref < len(LONG)
    assert ref + why + len("3ab413910e19") + 2 * table.GAP == 120  # nothing wasted, nothing over
    assert not layout.hang


def test_a_narrow_window_sets_why_on_lines_under_its_row() -> None:
    why = "pattern *ingress* (/etc/pinctl/config.d/50-platform-team.toml:12); pattern *platform* (env PINCTL_PINNED_IMAGES)"
    layout = table.lay_out(HEADERS, rows(ref=LONG, why=why), 80, FIT)
    assert layout.widths[1] <= table.REF_SOFT and layout.hang
    assert sum(layout.widths[i] for i in layout.columns) + table.GAP * (len(layout.columns) - 1) <= 80


def test_fixed_columns_never_shrink() -> None:
    layout = table.lay_out(["A", "B"], [["x" * 50, "y" * 50]], 60, table.NO_FIT)
    assert layout.widths == {0: 50, 1: 50}  # the terminal wraps what cannot give way


CRI_HEADERS = ["REF", "IMAGE ID", "SIZE", "PINNED", "CRI PINNED", "WHY"]
POLICY_WHY = "pattern example.test/alpha:* (/tmp/pinctl-sandbox/config.toml:1)"


def cri_rows(*whys: str) -> list[list[str]]:
    refs = ["localhost:5000/team/alpha:1.0", "example.test/pause:3.9", "localhost:5000/tools/zeta:0.9"]
    return [[ref, "3ab413910e19", "1.3 KiB", "yes", "no", why] for ref, why in zip(refs, whys)]


def test_a_one_word_why_stays_on_its_row_when_the_others_hang() -> None:
    """ls --cri at 80 columns: 'sandbox' has its row even though the long WHYs go on under theirs;
    a reference gives the cell it needs (it keeps 20 at the least)."""
    layout = table.lay_out(CRI_HEADERS, cri_rows(POLICY_WHY, "sandbox", "-"), 80, table.give_way("REF", "WHY"))
    assert layout.hang and layout.widths[5] >= len("sandbox")
    assert table.REF_FLOOR <= layout.widths[0] < len("localhost:5000/team/alpha:1.0")
    assert sum(layout.widths.values()) + table.GAP * 5 <= 80


def test_a_short_why_that_does_not_fit_its_row_goes_whole_under_it() -> None:
    # Split, it takes the same two lines and reads worse: "label;" on the row, "sandbox" alone under it.
    assert table.hung("label; sandbox", 9, 80) == ["", "label; sandbox"]
    assert table.hung("label", 9, 80) == ["label"]
    # Starting on the row saves a line: it does.
    long = "label on example.test/beta:2.0; pattern *beta* (/tmp/pinctl-sandbox/config.toml:1)"
    assert table.hung(long, 9, 80)[0] == "label on"


def test_a_reference_is_never_squeezed_below_20_cells() -> None:
    """Past every step the table may still be too wide (fixed columns): other shaped columns give,
    the reference keeps REF_FLOOR cells and the line overflows rather than show '…/…a:1.0'."""
    fit = table.give_way("REF", "WHY", paths=["ARCHIVE"])
    headers = ["ARCHIVE", "REF", "RESULT", "FIXED", "WHY"]
    row = ["/var/lib/pinctl/images/agent.tar", "localhost:5000/tools/zeta:0.9", "present, already pinned", "x" * 30, ""]
    layout = table.lay_out(headers, [row], 80, fit)
    assert layout.widths[1] == table.REF_FLOOR and layout.widths[0] == table.SQUEEZE_MIN
    assert shape.shorten_ref(row[1], layout.widths[1], "…") == "localhos…/…/zeta:0.9"


def test_a_column_empty_on_every_row_takes_no_space() -> None:
    fit = table.give_way("REF", "WHY")
    assert table.lay_out(["REF", "RESULT", "WHY"], [["example.test/app:1", "imported", ""]], 80, fit).columns == [0, 1]
    assert table.lay_out(["REF", "RESULT", "WHY"], [["example.test/app:1", "failed", "x"]], 80, fit).columns == [0, 1, 2]

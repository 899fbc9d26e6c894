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

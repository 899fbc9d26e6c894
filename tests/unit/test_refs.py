import pytest

from pinctl import refs

D = refs.DEFAULT_DOMAIN  # the one place pinctl names the default registry
from pinctl.errors import UsageError


@pytest.mark.parametrize(
    "given, expected",
    [
        ("alpine", f"{D}/library/alpine:latest"),
        ("alpine:3.19", f"{D}/library/alpine:3.19"),
        ("team/app", f"{D}/team/app:latest"),
        ("registry.example:5000/team/app:1.0", "registry.example:5000/team/app:1.0"),
        ("localhost/app", "localhost/app:latest"),
        ("example.test/a/b/c:v1.2-rc_3", "example.test/a/b/c:v1.2-rc_3"),
        ("app@sha256:" + "a" * 64, f"{D}/library/app@sha256:" + "a" * 64),
        ("app:1@sha256:" + "b" * 64, f"{D}/library/app:1@sha256:" + "b" * 64),
    ],
)
def test_normalize(given: str, expected: str) -> None:
    assert refs.normalize(given) == expected


@pytest.mark.parametrize("bad", ["Alpine", "app:", "app:bad tag", "a//b", "app@sha256:zz", "-app", "app:" + "x" * 200])
def test_normalize_rejects_malformed(bad: str) -> None:
    with pytest.raises(UsageError) as info:
        refs.normalize(bad)
    assert repr(bad) in str(info.value)


def test_selector_full_id_is_both_ref_and_prefix() -> None:
    text = "sha256:" + "c" * 64
    selector = refs.parse_selector(text)
    assert selector.ref == text and selector.id_prefix == "c" * 64


def test_selector_short_hex_is_name_and_prefix() -> None:
    selector = refs.parse_selector("abcdef12")
    assert selector.ref == f"{D}/library/abcdef12:latest"
    assert selector.id_prefix == "abcdef12"


def test_selector_too_short_for_an_id() -> None:
    assert refs.parse_selector("abc").id_prefix is None


@pytest.mark.parametrize("short", ["sha256:a", "sha256:abc"])
def test_sha256_prefix_needs_as_many_digits_as_a_bare_one(short: str) -> None:
    with pytest.raises(UsageError, match="too short"):
        refs.parse_selector(short)
    assert refs.parse_selector(short + "d" * (refs.ID_PREFIX_MIN - len(short) + 7)).id_prefix is not None


@pytest.mark.parametrize("bad", ["", " alpine", "sha256:XYZ", "UPPER"])
def test_selector_rejects(bad: str) -> None:
    with pytest.raises(UsageError):
        refs.parse_selector(bad)


def test_short_id() -> None:
    assert refs.short_id("sha256:" + "0123456789ab" + "f" * 52) == "0123456789ab"
    assert refs.short_id(None) == "<none>"


@pytest.mark.parametrize(("text", "hinted"), [("e14", True), ("e", True), ("sha256:e1", True), ("abc", True),
                                              ("e141", False), ("app", False), ("example.test/e14:1", False)])
def test_one_to_three_hex_digits_hint_at_the_id_prefix_rule(text: str, hinted: bool) -> None:
    hint = refs.not_found_hint(text)
    assert (hint is not None) == hinted
    assert hint is None or f"{refs.ID_PREFIX_MIN} or more hex digits" in hint


def test_an_abbreviated_id_a_table_shows_can_be_pasted_back() -> None:
    for shown in ("sha256:3ab413910e19…", "sha256:3ab413910e19..."):
        selector = refs.parse_selector(shown)
        assert selector.id_prefix == "3ab413910e19" and selector.ref is None
    with pytest.raises(UsageError):
        refs.parse_selector("sha256:3ab…")

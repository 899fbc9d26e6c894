"""Pinned-image patterns in both dialects, the fast Matcher against the plain matches(), and shadowing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pinctl import refs
from pinctl.errors import ConfigError, PatternError
from pinctl.pins.patterns import (
    DIALECTS,
    Matcher,
    Pattern,
    crio_equivalent,
    is_pattern,
    matches,
    parse_pattern,
    shadowed_by,
)

if TYPE_CHECKING:
    from pinctl.model import ImageRow

# Where short names land after normalisation; taken from refs so no registry host is spelled out here.
HUB = refs.DEFAULT_DOMAIN
ID = "sha256:" + "ab" * 32
OTHER_ID = "sha256:" + "cd" * 32


def parsed(text: str, dialect: str = "pinctl") -> Pattern:
    return parse_pattern(text, dialect)


# --- parsing -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, dialect, kind, needle, anchors",
    [
        ("registry.example/team/app:1.0", "pinctl", "exact", "registry.example/team/app:1.0", (True, True)),
        ("nginx:1.25", "pinctl", "exact", f"{HUB}/library/nginx:1.25", (True, True)),
        ("Team/App", "pinctl", "exact", f"{HUB}/team/app:latest", (True, True)),
        (ID.upper().replace("SHA256", "sha256"), "pinctl", "exact", ID, (True, True)),
        ("registry.example/*", "pinctl", "glob", "registry.example/", (True, False)),
        ("*App*", "pinctl", "keyword", "app", (False, False)),
        ("nginx:1.25", "crio", "exact", "nginx:1.25", (True, True)),
        ("registry.example/*", "crio", "glob", "registry.example/", (False, False)),
        ("*App*", "crio", "keyword", "app", (False, False)),
        ("**", "crio", "keyword", "", (False, False)),
        ("***", "crio", "keyword", "*", (False, False)),
        ("*app", "crio", "exact", "*app", (True, True)),
        ("a/*/b", "crio", "exact", "a/*/b", (True, True)),
        ("", "crio", "exact", "", (True, True)),
    ],
)
def test_parse_kinds(text: str, dialect: str, kind: str, needle: str, anchors: tuple[bool, bool]) -> None:
    pattern = parse_pattern(text, dialect, source="/etc/pinctl/config.toml")
    assert (pattern.text, pattern.dialect, pattern.source) == (text, dialect, "/etc/pinctl/config.toml")
    assert (pattern.kind, pattern.needle, (pattern.anchored_start, pattern.anchored_end)) == (kind, needle, anchors)


@pytest.mark.parametrize(
    "bad",
    [
        "*", "**", "***", "", "   ", "\t",
        " registry.example/app", "registry.example/app ", "registry.example/app\n",
        "registry.example/*/app", "a*b", "app**", "**app*", "*ap*p*",
        "*app", "*registry.example/app",
        "registry.example/my app", "app\x00", "app\x1b[0m", "app\u200b",
        "Not:A:Ref", "app:", "a//b", "registry.example/app@sha256:zz", "sha256:abc", "sha256:" + "g" * 64,
    ],
)
def test_pinctl_rejects(bad: str) -> None:
    with pytest.raises(PatternError) as info:
        parse_pattern(bad)
    assert repr(bad) in info.value.message
    assert info.value.hint and "\n" not in str(info.value)


def test_rejection_names_source_and_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        parse_pattern("a/*/b", source="/etc/pinctl/config.toml")
    assert str(info.value).startswith("/etc/pinctl/config.toml: pattern 'a/*/b'")
    assert info.value.exit_code == 2


def test_leading_star_hint_offers_the_keyword() -> None:
    with pytest.raises(PatternError) as info:
        parse_pattern("*app")
    assert "*app*" in info.value.hint


def test_crio_rejects_only_the_lone_star() -> None:
    with pytest.raises(PatternError) as info:
        parse_pattern("*", "crio")
    assert "'*'" in info.value.message


def test_unknown_dialect() -> None:
    with pytest.raises(PatternError) as info:
        parse_pattern("app", "podman")
    assert "'podman'" in info.value.message and "crio" in info.value.hint


@pytest.mark.parametrize("argument, expected", [("registry.example/*", True), ("*app*", True), ("app:1", False), (ID, False)])
def test_is_pattern(argument: str, expected: bool) -> None:
    assert is_pattern(argument) is expected


# --- matching ----------------------------------------------------------------------------------------

PINCTL_CASES = [
    # exact: whole name, any case, normalised like a docker reference
    ("registry.example/team/app:1.0", "registry.example/team/app:1.0", True),
    ("Registry.Example/Team/App:1.0", "registry.example/team/app:1.0", True),
    ("registry.example/team/app:1.0", "REGISTRY.EXAMPLE/TEAM/APP:1.0", True),
    ("registry.example/team/app:1.0", "registry.example/team/app:1.0.1", False),
    ("registry.example/team/app:1.0", "x.registry.example/team/app:1.0", False),
    ("nginx:1.25", f"{HUB}/library/nginx:1.25", True),
    ("nginx:1.25", "nginx:1.25", False),
    ("team/app", f"{HUB}/team/app:latest", True),
    ("registry.example/app", "registry.example/app:latest", True),
    ("registry.example/app", "registry.example/app:1", False),
    ("mirror.example:5000/app:1", "mirror.example:5000/app:1", True),
    (ID, ID, True),
    (ID.replace("ab", "AB"), ID, True),
    (ID, OTHER_ID, False),
    (ID, "registry.example/app@" + ID, False),
    ("registry.example/app@" + ID, "registry.example/app@" + ID, True),
    ("registry.example/app@" + ID, "registry.example/app@" + OTHER_ID, False),
    ("app@" + ID, f"{HUB}/library/app@" + ID, True),
    # glob: a prefix anchored at the start, not normalised
    ("registry.example/*", "registry.example/team/app:1", True),
    ("registry.example/*", "myregistry.example/team/app:1", False),
    ("registry.example/*", "mirror.example:5000/registry.example/app:1", False),
    ("REGISTRY.example/Team/*", "registry.example/team/app:1", True),
    ("registry.example/team/app:*", "registry.example/team/app:2", True),
    ("registry.example/team/app:*", "registry.example/team/app2:2", False),
    ("registry.example/team/app@*", "registry.example/team/app@" + ID, True),
    ("sha256:ab*", ID, True),
    ("sha256:ab*", OTHER_ID, False),
    ("nginx*", f"{HUB}/library/nginx:1", False),
    # keyword: a substring anywhere, any case
    ("*app*", "registry.example/team/app:1", True),
    ("*APP*", "registry.example/team/myapp:1", True),
    ("*app*", "registry.example/TEAM/MYAPP:1", True),
    ("*app*", "registry.example/team/ap:1", False),
    ("*example/team*", "registry.example/team/app:1", True),
]

CRIO_CASES = [
    # glob: CRI-O does not anchor it, so the prefix may sit anywhere in the name
    ("registry.example/*", "registry.example/team/app:1", True),
    ("registry.example/*", "myregistry.example/team/app:1", True),
    ("registry.example/*", "mirror.example:5000/registry.example/app:1", True),
    ("registry.example/*", "example.test/app:1", False),
    # exact: literal, whole name, any case, never normalised; stray stars are literal
    ("nginx:1.25", f"{HUB}/library/nginx:1.25", False),
    ("nginx:1.25", "NGINX:1.25", True),
    ("registry.example/app", "registry.example/app:latest", False),
    ("*app", "*app", True),
    ("*app", "registry.example/app", False),
    ("a/*/b", "a/*/b", True),
    ("a/*/b", "a/x/b", False),
    ("", "", True),
    # keyword, including the empty keyword of "**" and the literal star of "***"
    ("*app*", "registry.example/team/myapp:1", True),
    ("**", "registry.example/team/app:1", True),
    ("**", "", True),
    ("***", "registry.example/a*b", True),
    ("***", "registry.example/ab", False),
    # a NUL or newline cannot be in a name CRI-O sees, so such a pattern matches nothing
    ("registry\x00.example/*", "registry\x00.example/app", False),
    ("*\n*", "a\nb", False),
    ("a\nb", "a\nb", False),
]


@pytest.mark.parametrize("text, name, expected", PINCTL_CASES)
def test_pinctl_matching(text: str, name: str, expected: bool) -> None:
    assert matches(parsed(text), name) is expected
    assert Matcher([parsed(text)]).match([name]) == [[0] if expected else []]


@pytest.mark.parametrize("text, name, expected", CRIO_CASES)
def test_crio_matching(text: str, name: str, expected: bool) -> None:
    assert matches(parsed(text, "crio"), name) is expected
    assert Matcher([parsed(text, "crio")]).match([name]) == [[0] if expected else []]


# CRI-O's own unit tests for pinned_images, with the same shapes but example hosts in place of the
# public registries it names (this project keeps real registry hosts out of its sources).
CRIO_OWN_TESTS = [
    (["registry.example/crio/pause:latest", "mirror.example/crio/sandbox:latest"],
     ["registry.example/crio/pause:latest", "mirror.example/crio/sandbox:latest"]),
    (["*Fedora*"], ["registry.example/crio/Fedora34:latest"]),
    (["registry.example/*", "*Fedora*", "mirror.example/*"],
     ["registry.example/test/image", "example.test/CRIO-Fedora34", "mirror.example/test/image"]),
]


@pytest.mark.parametrize("texts, names", CRIO_OWN_TESTS)
def test_crio_own_cases(texts: list[str], names: list[str]) -> None:
    patterns = [parsed(text, "crio") for text in texts]
    for position, name in enumerate(names):
        hit = min(position, len(patterns) - 1)
        assert matches(patterns[hit], name)
    assert all(Matcher(patterns).match(names))


def test_crio_lone_star_is_an_error_not_a_crash() -> None:
    with pytest.raises(PatternError):
        parse_pattern("*", "crio")


def test_crio_double_star_matches_everything() -> None:
    names = ["registry.example/team/app:1", ID, "example.test/x@" + ID, "", "ANYTHING"]
    assert Matcher([parsed("**", "crio")]).match(names) == [[0]] * len(names)


def test_crio_equivalent_shows_the_difference() -> None:
    ours = parse_pattern("registry.example/*", source="/etc/pinctl/config.toml")
    theirs = crio_equivalent(ours)
    assert (theirs.dialect, theirs.kind, theirs.source) == ("crio", "glob", "/etc/pinctl/config.toml")
    assert not matches(ours, "myregistry.example/app:1") and matches(theirs, "myregistry.example/app:1")
    assert crio_equivalent(parsed("nginx:1.25")).needle == "nginx:1.25"
    assert crio_equivalent(theirs) == theirs


# --- the Matcher -------------------------------------------------------------------------------------


def test_matcher_indices_are_sorted_and_complete() -> None:
    patterns = [parsed("*app*"), parsed("registry.example/*"), parsed("registry.example/team/app:1"), parsed("*APP*")]
    names = ["registry.example/team/app:1", "example.test/app:2", "registry.example/x:1", "example.test/y:1"]
    assert Matcher(patterns).match(names) == [[0, 1, 2, 3], [0, 3], [1], []]


def test_matcher_empty_inputs() -> None:
    assert Matcher([]).match(["registry.example/a:1"]) == [[]]
    assert Matcher([parsed("*a*")]).match([]) == []


def test_matcher_duplicate_names_and_patterns() -> None:
    names = ["registry.example/a:1", "REGISTRY.example/a:1", "registry.example/b:1"]
    patterns = [parsed("registry.example/a:1"), parsed("registry.example/a:1"), parsed("*a:1*")]
    assert Matcher(patterns).match(names) == [[0, 1, 2], [0, 1, 2], []]


def test_matcher_counts_a_name_once_however_often_a_keyword_occurs_in_it() -> None:
    names = ["x/abab:aa", "x/aaa:1", "y/b:1"]
    patterns = [parsed("*ab*"), parsed("*aa*"), parsed("*a*"), parsed("*:1*")]
    assert Matcher(patterns).match(names) == [[0, 1, 2], [1, 2, 3], [3]]


def test_matcher_is_not_fooled_by_separators_inside_names() -> None:
    names = ["a\x00b", "x\x00", "b"]
    patterns = [parsed("b*"), parsed("b", "crio"), parsed("*x*"), parsed("x*", "crio"), parsed("\x00*", "crio")]
    assert Matcher(patterns).match(names) == [[], [2, 3], [0, 1]]


# --- shadowing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "narrow, broad, expected",
    [
        (("registry.example/team/app:1", "pinctl"), ("registry.example/team/*", "pinctl"), True),
        (("registry.example/team/*", "pinctl"), ("registry.example/*", "pinctl"), True),
        (("registry.example/*", "pinctl"), ("registry.example/team/*", "pinctl"), False),
        (("registry.example/team/*", "pinctl"), ("*team*", "pinctl"), True),
        (("*team*", "pinctl"), ("registry.example/*", "pinctl"), False),
        (("*team-a*", "pinctl"), ("*team*", "pinctl"), True),
        (("*team*", "pinctl"), ("*team-a*", "pinctl"), False),
        (("registry.example/a:1", "pinctl"), ("registry.example/a:1", "pinctl"), True),
        (("registry.example/a:1", "pinctl"), ("Registry.Example/A:1", "pinctl"), True),
        (("registry.example/a:1", "pinctl"), ("registry.example/a:2", "pinctl"), False),
        (("registry.example/*", "pinctl"), ("registry.example/a:1", "pinctl"), False),
        (("registry.example/a:1*", "pinctl"), ("registry.example/a:1", "pinctl"), False),
        (("registry.example/a:1", "crio"), ("registry.example/a:1*", "pinctl"), True),
        (("registry.example/*", "pinctl"), ("registry.example/*", "crio"), True),
        (("registry.example/*", "crio"), ("registry.example/*", "pinctl"), False),
        (("myregistry.example/x:1", "pinctl"), ("registry.example/*", "crio"), True),
        (("*anything*", "pinctl"), ("**", "crio"), True),
        (("**", "crio"), ("*a*", "pinctl"), False),
        (("a\nb", "crio"), ("registry.example/a:1", "pinctl"), True),
        (("registry.example/a:1", "pinctl"), ("a\nb", "crio"), False),
    ],
)
def test_shadowed_by(narrow: tuple[str, str], broad: tuple[str, str], expected: bool) -> None:
    assert shadowed_by(parsed(*narrow), parsed(*broad)) is expected


# --- properties --------------------------------------------------------------------------------------

# Few letters in both cases plus the characters patterns care about, so generated names collide.
ALPHABET = "aAbB/:.@*-\x00\nΣ"
small_text = st.text(ALPHABET, max_size=7)
ref_like = st.lists(
    st.sampled_from(["a", "B", "reg.example", "m.test:5000", "/", ":1", "@" + ID, "*", "*a", "Σ"]), max_size=5
).map("".join)
pattern_text = st.one_of(small_text, ref_like)
dialects = st.sampled_from(DIALECTS)


def try_parse(text: str, dialect: str) -> Optional[Pattern]:
    try:
        return parse_pattern(text, dialect)
    except PatternError:
        return None


def names_near(patterns: list[Pattern], extra: list[str]) -> list[str]:
    """Names that sit on, just inside and just outside each pattern's needle, so matches are tested."""
    names = list(extra)
    for pattern in patterns:
        needle = pattern.needle
        names += [needle, needle.upper(), needle + "x", "x" + needle, "a" + needle + "/b", needle[:-1], needle * 2]
        names += ["\x00" + needle, needle + "\x00"]
    return names


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=12), pattern_text), dialects)
def test_parse_returns_a_pattern_or_raises_pattern_error(text: str, dialect: str) -> None:
    pattern = try_parse(text, dialect)
    if pattern is not None:
        assert (pattern.text, pattern.dialect) == (text, dialect)
        assert pattern.kind in ("exact", "glob", "keyword")


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(pattern_text, dialects), max_size=12), st.lists(small_text, max_size=12))
def test_matcher_agrees_with_matches(texts: list[tuple[str, str]], extra: list[str]) -> None:
    patterns = [p for p in (try_parse(text, dialect) for text, dialect in texts) if p is not None]
    names = names_near(patterns, extra)
    expected = [[index for index, pattern in enumerate(patterns) if matches(pattern, name)] for name in names]
    assert Matcher(patterns).match(names) == expected


# Every needle/anchor combination, including the suffix-only one no dialect produces today.
built_pattern = st.builds(
    lambda needle, start, end: Pattern("", "glob", "pinctl", needle=needle.lower(), anchored_start=start, anchored_end=end),
    small_text, st.booleans(), st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(built_pattern, max_size=8), st.lists(small_text, max_size=8))
def test_matcher_agrees_with_matches_for_any_shape(patterns: list[Pattern], extra: list[str]) -> None:
    names = names_near(patterns, extra)
    expected = [[index for index, pattern in enumerate(patterns) if matches(pattern, name)] for name in names]
    assert Matcher(patterns).match(names) == expected


@settings(max_examples=400, deadline=None)
@given(pattern_text, dialects, pattern_text, dialects, st.lists(small_text, max_size=6))
def test_shadowed_by_is_sound(narrow_text: str, narrow_dialect: str, broad_text: str, broad_dialect: str, extra: list[str]) -> None:
    narrow, broad = try_parse(narrow_text, narrow_dialect), try_parse(broad_text, broad_dialect)
    if narrow is None or broad is None or not shadowed_by(narrow, broad):
        return
    for name in names_near([narrow, broad], extra):
        assert not matches(narrow, name) or matches(broad, name), name


@settings(max_examples=300, deadline=None)
@given(built_pattern, built_pattern, st.lists(small_text, max_size=6))
def test_shadowed_by_is_sound_for_any_shape(narrow: Pattern, broad: Pattern, extra: list[str]) -> None:
    if shadowed_by(narrow, broad):
        for name in names_near([narrow, broad], extra):
            assert not matches(narrow, name) or matches(broad, name), name


# --- the crio dialect matches names only (CRI-O v1.34.0 FilterPinnedImage never sees the ID) ----------


def _row(ref: str, image_id: Optional[str]) -> ImageRow:
    from pinctl.model import Descriptor, ImageRow

    return ImageRow("k8s.io", ref, image_id, Descriptor("m", "sha256:" + "ef" * 32, 1), 1, {})


DB_ID = "sha256:" + "db" * 32


@pytest.mark.parametrize("text", ["*db*", DB_ID, "sha256:*", "sha256:db*", "*" + DB_ID[10:20] + "*"])
def test_crio_patterns_never_match_an_image_id(text: str) -> None:
    from pinctl.pins.policy import Policy, coverage, could_match_an_id, sync_targets

    policy = Policy([parsed(text, "crio")])
    rows = [_row("registry.example/app:1", DB_ID)]
    cover = coverage(policy, rows)
    assert DB_ID not in cover.by_image and cover.by_ref["registry.example/app:1"] == []
    assert sync_targets(rows, cover) == []
    assert could_match_an_id(policy.patterns[0]) is False


def test_crio_pattern_matches_a_sha256_name_like_any_other_name() -> None:
    from pinctl.pins.policy import Policy, coverage

    # The CRI lists an image without tags by a digest-only name: a name, so CRI-O may match it.
    rows = [_row(DB_ID, DB_ID)]
    for text in ("*db*", DB_ID, "sha256:*"):
        assert coverage(Policy([parsed(text, "crio")]), rows).by_image[DB_ID] == [0], text


def test_pinctl_dialect_still_matches_image_ids() -> None:
    from pinctl.pins.policy import Policy, coverage, could_match_an_id

    rows = [_row("registry.example/app:1", DB_ID)]
    for text in (DB_ID, "sha256:db*", "*dbdb*"):
        assert coverage(Policy([parsed(text)]), rows).by_image[DB_ID] == [0], text
        assert could_match_an_id(parsed(text)), text


def test_mixed_policy_keeps_only_pinctl_hits_on_ids() -> None:
    from pinctl.pins.policy import Policy, coverage

    rows = [_row("registry.example/app:1", DB_ID)]
    policy = Policy([parsed("*dbdb*", "crio"), parsed("*dbdb*"), parsed("*app*", "crio")])
    assert coverage(policy, rows).by_image[DB_ID] == [1, 2]


def test_lint_unmatched_ignores_ids_for_crio_patterns() -> None:
    from pinctl.pins.lint import unmatched
    from pinctl.pins.policy import Policy

    policy = Policy([parsed("*dbdb*", "crio"), parsed("*dbdb*")])
    found = unmatched(policy, ["registry.example/app:1"], [DB_ID])
    assert [(p.pattern, p.kind) for p in found] == [("*dbdb*", "unmatched")] and found[0].source == ""
    assert len(unmatched(policy, ["registry.example/app:1", DB_ID], [])) == 0


def test_a_watchers_batch_never_pins_by_id_through_a_crio_pattern() -> None:
    # A mixed policy needs IDs (pinctl's sha256: glob), but the crio keyword must still match names only.
    from pinctl.config.loader import PatternEntry
    from pinctl.pins.plans import make_batch_sync_plan
    from pinctl.pins.policy import compile_policy
    from tests.unit.fakes import FakeStore

    store = FakeStore()
    store.add("k8s.io", "example.test/app:1", "d")  # its ID is sha256:dddd...
    store.add("k8s.io", "example.test/other:1", "e")
    policy = compile_policy([PatternEntry("*ddd*", "f:1", "crio"), PatternEntry("sha256:eee*", "f:2", "pinctl")])
    plan = make_batch_sync_plan(store, "k8s.io", store.list_images("k8s.io"), policy, prune=False)
    assert {change.image.name for change in plan.changes} == {"example.test/other:1"}

"""config lint's shadowing check: the fast one against the plain double loop it replaces."""

from __future__ import annotations

from typing import Optional, Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pinctl.errors import PatternError
from pinctl.pins.lint import Problem, shadowed
from pinctl.pins.patterns import DIALECTS, Pattern, parse_pattern, shadowed_by

# As in test_patterns: few letters so needles collide, and the separators that make a pattern dead.
ALPHABET = "aAbB/:.*-\x00\nΣ"
small_text = st.text(ALPHABET, max_size=6)
ref_like = st.lists(st.sampled_from(["a", "B", "reg.example", "/", ":1", "*", "*a", "Σ"]), max_size=4).map("".join)


def plain_shadowed(patterns: Sequence[Pattern]) -> list[Problem]:
    """The obviously right version: every pair, the first broad pattern that covers each."""
    problems: list[Problem] = []
    for i, narrow in enumerate(patterns):
        for j, broad in enumerate(patterns):
            if i == j or not shadowed_by(narrow, broad):
                continue
            if shadowed_by(broad, narrow) and j > i:
                continue
            what = "duplicates" if shadowed_by(broad, narrow) else "is shadowed by"
            problems.append(Problem("shadowed", narrow.text, narrow.source,
                                    f"{narrow.text!r} {what} {broad.text!r} ({broad.source})"))
            break
    return problems


def try_parse(text: str, dialect: str, source: str) -> Optional[Pattern]:
    try:
        return parse_pattern(text, dialect, source)
    except PatternError:
        return None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.one_of(small_text, ref_like), st.sampled_from(DIALECTS)), max_size=14))
def test_shadowed_agrees_with_the_double_loop(texts: list[tuple[str, str]]) -> None:
    parsed = (try_parse(text, dialect, f"f:{line}") for line, (text, dialect) in enumerate(texts, 1))
    patterns = [p for p in parsed if p is not None]
    assert shadowed(patterns) == plain_shadowed(patterns)


# Every needle/anchor combination, including the suffix-only one no dialect produces today.
built_pattern = st.builds(
    lambda needle, start, end, line: Pattern(f"p{line}", "glob", "pinctl", f"f:{line}", needle.lower(), start, end),
    small_text, st.booleans(), st.booleans(), st.integers(1, 99),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(built_pattern, max_size=14))
def test_shadowed_agrees_with_the_double_loop_for_any_shape(patterns: list[Pattern]) -> None:
    assert shadowed(patterns) == plain_shadowed(patterns)


def test_the_first_covering_pattern_is_named_and_the_later_of_equals_duplicates() -> None:
    patterns = [parse_pattern(text, "pinctl", f"f:{n}") for n, text in enumerate([
        "registry.example/a:1", "registry.example/team/*", "registry.example/*", "registry.example/a:1",
        "registry.example/team/x:1", "*team*"], 1)]
    assert [p.message for p in shadowed(patterns)] == [
        "'registry.example/a:1' is shadowed by 'registry.example/*' (f:3)",
        "'registry.example/team/*' is shadowed by 'registry.example/*' (f:3)",
        "'registry.example/a:1' duplicates 'registry.example/a:1' (f:1)",
        "'registry.example/team/x:1' is shadowed by 'registry.example/team/*' (f:2)",
    ]

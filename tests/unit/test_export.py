"""config export renders the policy for each runtime; what a runtime cannot say is expanded or noted."""

from __future__ import annotations

import shlex
import sys

import pytest

from pinctl import refs
from pinctl.config.loader import PatternEntry
from pinctl.pins.export import export
from pinctl.pins.policy import Policy, compile_policy

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PRESENT = ["registry.example/base/os:1", "registry.example/base/os:2", "example.test/fedora-tools:3", "example.test/app:1"]


def policy(*texts: str, dialect: str = "pinctl") -> Policy:
    return compile_policy([PatternEntry(t, f"cfg:{n}", dialect) for n, t in enumerate(texts, 1)])


def test_crio_drop_in_parses_back_and_warns_about_unanchored_globs() -> None:
    result = export("crio", policy("registry.example/base/*", "*fedora*", "app:1"), PRESENT, [])
    parsed = tomllib.loads(result.text)
    assert parsed["crio"]["image"]["pinned_images"] == ["registry.example/base/*", "*fedora*", refs.normalize("app:1")]
    assert any("does not anchor globs" in note for note in result.notes)


def test_containerd_takes_exact_references_only() -> None:
    result = export("containerd", policy("registry.example/base/*", "example.test/app:1"), PRESENT, [])
    parsed = tomllib.loads(result.text)
    table = parsed["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]
    assert sorted(table.values()) == ["example.test/app:1", "registry.example/base/os:1", "registry.example/base/os:2"]
    assert parsed["version"] == 3
    [note] = result.notes
    assert "registry.example/base/*" in note and "expanded to the 2" in note


def test_cri_dockerd_flags_keep_globs_and_expand_keywords() -> None:
    result = export("cri-dockerd", policy("registry.example/base/*", "*fedora*"), PRESENT, ["team.example/keep=true", "keep"])
    args = shlex.split(result.text)
    assert args == [
        "--pinned-images=registry.example/base/*,example.test/fedora-tools:3",
        "--pinned-image-labels=team.example/keep=true,keep",
    ]
    assert any("*fedora*" in note for note in result.notes)


def test_crio_dialect_patterns_pass_through_but_need_expansion_elsewhere() -> None:
    crio = policy("registry.example/*", dialect="crio")
    assert tomllib.loads(export("crio", crio, PRESENT, []).text)["crio"]["image"]["pinned_images"] == ["registry.example/*"]
    assert export("crio", crio, PRESENT, []).notes == []
    assert "registry.example/base/os:1" in export("cri-dockerd", crio, PRESENT, []).text


@pytest.mark.parametrize(
    "target, pattern", [("crio", "sha256:" + "ab" * 32), ("containerd", "*fedora*"), ("cri-dockerd", "*fedora*")]
)
def test_offline_leaves_out_what_needs_the_images_and_says_so(target: str, pattern: str) -> None:
    result = export(target, policy(pattern), None, [])
    assert pattern not in result.text and "fedora-tools" not in result.text
    assert any("--offline" in note and pattern in note for note in result.notes)

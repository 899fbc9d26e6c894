"""config export renders the policy for each runtime; what a runtime cannot say is expanded or noted."""

from __future__ import annotations

import shlex
import sys

import pytest

from pinctl import refs
from pinctl.config.loader import PatternEntry
from pinctl.errors import UsageError
from pinctl.pins.export import ContainerdTarget, export
from pinctl.pins.patterns import matches
from pinctl.pins.policy import Policy, compile_policy

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

# A containerd 2.1 whose config is version 3: the table goes out with no note of its own.
CTD21 = ContainerdTarget("/etc/containerd/config.toml", 3, "2.1.9", "/run/containerd/containerd.sock")
PRESENT = ["registry.example/base/os:1", "registry.example/base/os:2", "example.test/fedora-tools:3", "example.test/app:1"]


def policy(*texts: str, dialect: str = "pinctl") -> Policy:
    return compile_policy([PatternEntry(t, f"cfg:{n}", dialect) for n, t in enumerate(texts, 1)])


def test_crio_drop_in_parses_back_and_warns_about_unanchored_globs() -> None:
    result = export("crio", policy("registry.example/base/*", "*fedora*", "app:1"), PRESENT, [])
    parsed = tomllib.loads(result.text)
    assert parsed["crio"]["image"]["pinned_images"] == ["registry.example/base/*", "*fedora*", refs.normalize("app:1")]
    assert any("does not anchor globs" in note for note in result.notes)


def test_containerd_takes_exact_references_only() -> None:
    result = export("containerd", policy("registry.example/base/*", "example.test/app:1"), PRESENT, [],
                    containerd=CTD21)
    parsed = tomllib.loads(result.text)
    table = parsed["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]
    assert sorted(table.values()) == ["example.test/app:1", "registry.example/base/os:1", "registry.example/base/os:2"]
    assert parsed["version"] == 3
    [note] = result.notes
    assert "registry.example/base/*" in note and "expanded to the 2" in note


# Record names in k8s.io as containerd's CRI stores them (fully normalised, with a tag or digest),
# and two that only ctr makes: a tagless one and a short one.
CRI_NAMES = [
    refs.normalize("rtbare"), refs.normalize("nginx:1.27"), "example.test/app:1", "example.test/app:V2",
    "example.test/glob/a:1", "example.test/glob/b@sha256:" + "c" * 64, "example.test/other:1",
    "example.test/keyword-thing:3",
]
CTR_ONLY = ["example.test/glob/tagless", "short:1"]


def pinned_images(text: str) -> dict[str, str]:
    table: dict[str, str] = tomllib.loads(text)["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]
    return table


@pytest.mark.parametrize("texts", [
    ("rtbare", "nginx:1.27"),                   # short and tagless exact names: normalised, :latest added
    ("example.test/glob/*",),                   # a glob: expanded, the ctr-only tagless name left out
    ("*keyword*", "example.test/app:v2"),       # a keyword; a name pinctl matches whatever its case
    ("rtbare", "example.test/glob/*", "*keyword*", "*short*"),
])
def test_containerd_table_pins_what_the_policy_wants_as_containerd_compares(texts: tuple[str, ...]) -> None:
    """containerd 2.x labels a record whose name equals an entry as a plain string: the table
    selects exactly the CRI's records the policy covers, and no entry is tagless (those pin
    nothing, containerd issue 13314)."""
    wanted = policy(*texts)
    result = export("containerd", wanted, sorted(CRI_NAMES + CTR_ONLY), [])
    entries = set(pinned_images(result.text).values())
    covered = {name for name in CRI_NAMES if any(matches(p, name) for p in wanted.patterns)}
    assert {name for name in CRI_NAMES if name in entries} == covered
    assert entries <= set(CRI_NAMES) | {refs.normalize(t) for t in texts if "*" not in t}
    for entry in entries:
        assert refs.normalize(entry) == entry and ("@" in entry or ":" in entry.rsplit("/", 1)[-1]), entry
    for name in CTR_ONLY:
        if any(matches(p, name) for p in wanted.patterns):
            assert name not in entries and any(name in n and "13314" in n for n in result.notes)


def test_containerd_table_names_a_tag_and_digest_pull_by_its_digest() -> None:
    digest = "sha256:" + "d" * 64
    result = export("containerd", policy(f"example.test/app:1@{digest}", "rtbare"), [], [],
                    containerd=CTD21)
    assert list(pinned_images(result.text).values()) == [f"example.test/app@{digest}", "docker.io/library/rtbare:latest"]
    [note] = result.notes
    assert "by its digest alone" in note


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
    "target, pattern", [("containerd", "*fedora*"), ("cri-dockerd", "*fedora*")]
)
def test_offline_leaves_out_what_needs_the_images_and_says_so(target: str, pattern: str) -> None:
    result = export(target, policy(pattern), None, [])
    assert pattern not in result.text and "fedora-tools" not in result.text
    assert any("--offline" in note and pattern in note for note in result.notes)


# Docker's names for the images of a node, as RepoTags/RepoDigests show them, with the normalised
# name pinctl's policy matches.
DOCKER_NAMES = {
    "nginx:1.27": refs.normalize("nginx:1.27"),
    "team/tool:2": refs.normalize("team/tool:2"),
    "registry.example/base/os:1": "registry.example/base/os:1",
    "registry.example/base/os:2": "registry.example/base/os:2",
    "registry.example/other/os:1": "registry.example/other/os:1",
    "example.test/fedora-tools:3": "example.test/fedora-tools:3",
    "example.test/app:1": "example.test/app:1",
    "example.test/app:2": "example.test/app:2",
}


@pytest.mark.parametrize("texts", [
    ("nginx:1.27", "team/tool:2"),                        # short Docker names, normalised by pinctl
    ("registry.example/base/*",),                         # a glob: a plain prefix for cri-dockerd
    ("*fedora*",),                                        # a keyword: expanded to the names present
    ("example.test/app:1", "registry.example/base/*", "*fedora*", "nginx:1.27"),
])
def test_cri_dockerd_flags_pin_what_the_policy_wants_in_cri_dockerds_semantics(texts: tuple[str, ...]) -> None:
    """The exported --pinned-images, read as cri-dockerd reads them (pins.dockerd), select exactly
    the Docker images pinctl's policy covers. (No release of cri-dockerd with selectors can be
    built here; this holds the export to its source's semantics.)"""
    from pinctl.pins.dockerd import Selectors

    wanted = policy(*texts)
    result = export("cri-dockerd", wanted, sorted(DOCKER_NAMES.values()), [])
    [flag] = shlex.split(result.text)
    selectors = Selectors.parse(flag.removeprefix("--pinned-images=").split(","))
    pinned = {name for name in DOCKER_NAMES if selectors.match([name], [], {})}
    assert pinned == {name for name, full in DOCKER_NAMES.items() if any(matches(p, full) for p in wanted.patterns)}
    assert all("docker.io" not in entry for entry in flag.split(","))  # Docker's own spelling, not the full one
    assert any("0.4.7" in note for note in result.notes)


def test_cri_dockerd_label_rules_go_out_as_they_are_and_match_config_labels() -> None:
    from pinctl.pins.dockerd import Selectors

    result = export("cri-dockerd", policy(), [], ["team.example/keep=true", "keep"])
    [flag] = shlex.split(result.text)
    selectors = Selectors.parse([], flag.removeprefix("--pinned-image-labels=").split(","))
    assert selectors.match([], [], {"team.example/keep": "true"}) == "--pinned-image-labels team.example/keep=true"
    assert selectors.match([], [], {"keep": "anything"}) == "--pinned-image-labels keep"
    assert selectors.match([], [], {"team.example/keep": "false"}) is None


# -- image-ID patterns: written as the image's names, or refused; never dropped --------------------

IMAGE_ID = "sha256:" + "ab" * 32
DIGEST = "sha256:" + "cd" * 32
WITH_IDS = [("registry.example/base/os:1", IMAGE_ID, DIGEST), ("example.test/app:1", "sha256:" + "ef" * 32, DIGEST),
            (IMAGE_ID, IMAGE_ID, DIGEST)]


@pytest.mark.parametrize("pattern", [IMAGE_ID, "sha256:abab*"])
@pytest.mark.parametrize("target", ["crio", "containerd", "cri-dockerd"])
def test_an_id_pattern_is_written_as_the_names_of_that_image(target: str, pattern: str) -> None:
    result = export(target, policy(pattern), WITH_IDS, [])
    assert "registry.example/base/os:1" in result.text and f"registry.example/base/os@{DIGEST}" in result.text
    assert "example.test/app" not in result.text and "sha256:abab" not in result.text.replace(DIGEST, "")
    # Digest references are written for the ID pattern only, not added to every expansion.
    assert f"example.test/app@{DIGEST}" not in export(target, policy("*app*"), WITH_IDS, []).text
    assert any(pattern in note and "not image IDs" in note for note in result.notes)


@pytest.mark.parametrize("present", [None, [("example.test/app:1", "sha256:" + "ef" * 32, DIGEST)]])
@pytest.mark.parametrize("target", ["crio", "containerd", "cri-dockerd"])
def test_an_id_pattern_with_no_such_image_is_refused_with_the_fix(target: str, present: object) -> None:
    from pinctl.errors import UsageError

    with pytest.raises(UsageError) as info:
        export(target, policy("example.test/app:1", IMAGE_ID), present, [])  # type: ignore[arg-type]
    message = str(info.value)
    assert IMAGE_ID in message and "(cfg:2)" in message and "\n" not in message
    assert message.endswith("(pin the image by name, or run export where the image is)")


def test_crio_dialect_sha256_patterns_are_names_and_pass_through() -> None:
    result = export("crio", policy(IMAGE_ID, "sha256:*", dialect="crio"), None, [])
    assert tomllib.loads(result.text)["crio"]["image"]["pinned_images"] == [IMAGE_ID, "sha256:*"]


def test_crio_export_carries_over_the_sites_entries_and_says_how_to_load_it() -> None:
    from pinctl.config.crio import CrioEntry

    site = [CrioEntry("site.example/keep:1", "/etc/crio/crio.conf.d/10-site.conf", 4), CrioEntry("app:1", "/x", 2)]
    result = export("crio", policy("app:1", "registry.example/base/*"), PRESENT, [], site=site)
    assert tomllib.loads(result.text)["crio"]["image"]["pinned_images"] == [
        "site.example/keep:1", "app:1", refs.normalize("app:1"), "registry.example/base/*"]
    assert '"site.example/keep:1",  # site: /etc/crio/crio.conf.d/10-site.conf:4' in result.text
    assert "LAST drop-in" in result.text and "systemctl reload crio" in result.text
    assert "overrides this one" in result.text


def test_containerd_and_cri_dockerd_say_how_the_runtime_reads_it() -> None:
    text = export("containerd", policy("example.test/app:1"), PRESENT, []).text
    assert "1.x has no pinned_images" in text and "restart containerd" in text
    notes = export("cri-dockerd", policy("example.test/app:1"), PRESENT, []).notes
    assert any("restart cri-dockerd" in note and "0.4.7" in note for note in notes)


def test_containerd_version_is_read_from_what_the_daemon_says() -> None:
    assert [ContainerdTarget(version=v).major for v in ("1.7.24~ds1", "v2.1.9", "2.1.9+unknown", "", None)] == [
        1, 2, 2, None, None]


@pytest.mark.parametrize("version", ["1.7.24~ds1", "1.6.36", "v1.7.0"])
def test_containerd_1x_is_refused_in_one_line_naming_pinctl_sync(version: str) -> None:
    target = ContainerdTarget("/etc/containerd/config.toml", 2, version, "/run/containerd/containerd.sock")
    with pytest.raises(UsageError) as refused:
        export("containerd", policy("example.test/app:1"), PRESENT, [], containerd=target)
    line = str(refused.value)
    assert "\n" not in line and f"containerd {version} at /run/containerd/containerd.sock has no pinned_images" in line
    assert "pinctl sync" in refused.value.hint


def comment(text: str) -> str:
    """The header's comment lines as one text."""
    return " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))


@pytest.mark.parametrize("config_version, written", [(3, 3), (2, 2), (1, 3), (None, 3)])
def test_containerd_2x_gets_the_version_its_file_is_and_the_files_path(config_version: int | None,
                                                                        written: int) -> None:
    target = ContainerdTarget("/srv/ctd/config.toml", config_version, "2.1.9", "/run/ctd.sock")
    result = export("containerd", policy("example.test/app:1"), PRESENT, [], containerd=target)
    parsed = tomllib.loads(result.text)
    assert parsed["version"] == written
    assert pinned_images(result.text) == {"pinctl-1": "example.test/app:1"}
    said = comment(result.text)
    assert said.startswith(f"containerd 2.1.9 CRI config (version {written})")
    assert "/srv/ctd/config.toml" in said and "/etc/containerd" not in said and "restart containerd" in said
    assert "1.x" not in said and result.notes == []
    if config_version == 1:
        assert "is version 1: convert it first (containerd --config /srv/ctd/config.toml config migrate" in said
    assert all(len(line) <= 80 for line in result.text.splitlines())


def test_without_the_daemons_version_a_version_2_file_gets_a_table_for_both_and_the_truth() -> None:
    """--offline: 1.x and 2.x both read a version 2 file; 2.x reads the table in it (1.x starts and ignores it)."""
    target = ContainerdTarget("/srv/ctd/config.toml", 2)
    result = export("containerd", policy("example.test/app:1"), PRESENT, [], containerd=target)
    assert tomllib.loads(result.text)["version"] == 2
    assert "containerd 1.x has no pinned_images and ignores this table" in comment(result.text)
    [note] = result.notes
    assert "was not asked (--offline)" in note and "/srv/ctd/config.toml is version 2" in note
    assert "on 1.x run pinctl sync" in note


@pytest.mark.parametrize("config_version", [None, 1])
def test_without_the_daemons_version_no_version_3_is_written_unless_the_file_is(config_version: int | None) -> None:
    """A version 3 config stops containerd 1.x from starting: not knowing, export writes version 2."""
    target = ContainerdTarget("/srv/ctd/config.toml", config_version)
    result = export("containerd", policy("example.test/app:1"), PRESENT, [], containerd=target)
    assert tomllib.loads(result.text)["version"] == 2
    assert comment(result.text).startswith("containerd CRI config (version 2)")
    assert "containerd 1.x has no pinned_images" in comment(result.text) and len(result.notes) == 1


def test_a_version_3_file_says_2x_without_the_daemon() -> None:
    result = export("containerd", policy("example.test/app:1"), PRESENT, [], containerd=ContainerdTarget("/c.toml", 3))
    assert comment(result.text).startswith("containerd 2.x CRI config (version 3)") and result.notes == []


@pytest.mark.parametrize("config_version, written", [(4, 4), (3, 3), (2, 2), (1, 2), (None, 2)])
def test_where_the_config_imports_a_directory_a_drop_in_is_written_for_it(config_version: int | None,
                                                                          written: int) -> None:
    """The drop-in declares the main file's version: under a version 2 file, 2.0 to 2.2 would drop
    the sandbox_image of the merged config were the drop-in version 3."""
    target = ContainerdTarget("/etc/containerd/config.toml", config_version, "v2.4.2", "/run/ctd.sock",
                              dropin=("/etc/containerd/conf.d/99-pinctl.toml", "/etc/containerd/conf.d/*.toml"))
    result = export("containerd", policy("example.test/app:1"), PRESENT, [], containerd=target)
    assert tomllib.loads(result.text)["version"] == written
    assert pinned_images(result.text) == {"pinctl-1": "example.test/app:1"}
    said = comment(result.text)
    assert said.startswith(f"containerd v2.4.2 CRI config (version {written}), a drop-in")
    assert "Save it as /etc/containerd/conf.d/99-pinctl.toml" in said
    assert "imports '/etc/containerd/conf.d/*.toml'" in said and "at start only" in said
    assert "restart containerd" in said and "Merge the table" not in said
    [note] = result.notes
    assert "save it as /etc/containerd/conf.d/99-pinctl.toml" in note and "restart containerd" in note
    assert all(len(line) <= 80 for line in result.text.splitlines())


def test_a_drop_in_is_not_written_for_containerd_1x() -> None:
    target = ContainerdTarget("/etc/containerd/config.toml", 2, "1.7.24", "/run/ctd.sock",
                              dropin=("/etc/containerd/conf.d/99-pinctl.toml", "conf.d/*.toml"))
    with pytest.raises(UsageError, match="has no pinned_images"):
        export("containerd", policy("example.test/app:1"), PRESENT, [], containerd=target)

"""pinctl.config.crio: CRI-O's configuration as CRI-O v1.34.0 sees it (the effective pinned_images
and pause_image, pinctl's own drop-in and who wrote each of its entries), and writing that drop-in."""

from __future__ import annotations

import os
import pathlib
import stat
import tomllib

import pytest

from pinctl.config import crio
from pinctl.config.crio import (
    CRIO_DEFAULT_PATH,
    PAUSE_IMAGE_DEFAULT,
    PINCTL_DROPIN_NAME,
    CrioEntry,
    read_crio_config,
    render_dropin,
    write_dropin,
)
from pinctl.errors import ConfigError, PatternError, PinctlError
from pinctl.pins.policy import compile_policy

from .config_helpers import (
    NOBODY,
    as_root_fixture,  # noqa: F401  (the as_root fixture)
    isolated_config,  # noqa: F401  (the autouse fixture: no machine /etc, a non-root user)
    load,
    needs_root,
    write,
)


@pytest.fixture
def main(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "crio" / "crio.conf"
    write(path, '[crio.image]\npinned_images = [\n  "registry.example/main:1",\n]\n')
    return path


def dropins(main: pathlib.Path) -> pathlib.Path:
    return pathlib.Path(f"{main}.d")


def test_the_constants() -> None:
    assert CRIO_DEFAULT_PATH == "/etc/crio/crio.conf"
    assert PINCTL_DROPIN_NAME == "zz-pinctl.conf"
    # CRI-O v1.34.0, pkg/config/config_linux.go: DefaultPauseImage.
    assert PAUSE_IMAGE_DEFAULT == "registry.k8s.io/pause:3.10"
    assert CrioEntry("a", "/f", 3).where == "/f:3" and CrioEntry("a", "/f", 0).where == "/f"


def test_missing_default_is_cri_os_defaults(tmp_path: pathlib.Path) -> None:
    found = read_crio_config(str(tmp_path / "none" / "crio.conf"))
    assert (found.files, found.pinned_images, found.pinned_from) == ((), (), None)
    assert (found.pause_image, found.pause_where) == (PAUSE_IMAGE_DEFAULT, "CRI-O's default")
    assert found.dropin_path == str(tmp_path / "none" / "crio.conf.d" / PINCTL_DROPIN_NAME)


def test_missing_explicit_path_is_an_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match="crio.conf does not exist"):
        read_crio_config(str(tmp_path / "none" / "crio.conf"), explicit=True)


def test_last_file_wins_for_each_key(main: pathlib.Path) -> None:
    d = dropins(main)
    write(d / "10-pause.conf", '[crio.image]\n\npause_image = "registry.example/pause:9"\n')
    winner = write(d / "20-pins.conf", '[crio.image]\npinned_images = [\n  "a.example/x",\n  "*y*",\n]\n')
    write(d / "30-other.conf", '[crio.runtime]\nlog_level = "debug"\n')
    found = read_crio_config(str(main))
    assert found.files == (str(main), str(d / "10-pause.conf"), winner, str(d / "30-other.conf"))
    assert found.pinned_images == (CrioEntry("a.example/x", winner, 3), CrioEntry("*y*", winner, 4))
    assert found.pinned_from == winner and found.site_entries == found.pinned_images
    assert (found.pause_image, found.pause_where) == ("registry.example/pause:9", f"{d / '10-pause.conf'}:3")
    assert found.own_entries == () and found.overriding == () and found.warnings == ()


def test_empty_and_blank_items_are_read_with_a_warning_each(main: pathlib.Path) -> None:
    write(main, '[crio.image]\npinned_images = [\n  "registry.example/a",\n  "",\n  "  ",\n]\n')
    found = read_crio_config(str(main))
    assert [e.text for e in found.pinned_images] == ["registry.example/a", "", "  "]
    assert len(found.warnings) == 2
    assert found.warnings[0].startswith(f"{main}:4: ") and "pins nothing" in found.warnings[0]
    assert found.warnings[1].startswith(f"{main}:5: ") and "blank" in found.warnings[1]


def test_from_crio_reads_empty_items_and_warns_instead_of_refusing(main: pathlib.Path) -> None:
    write(main, '[crio.image]\npinned_images = [\n  "registry.example/a",\n  "",\n  "  ",\n]\n')
    said: list[str] = []
    from pinctl.config import loader

    cfg = loader.load(None, {}, from_crio=str(main), warn=said.append)
    assert [p.text for p in cfg.patterns] == ["registry.example/a", "", "  "]
    assert said == list(cfg.warnings) and len(said) == 2 and all(f"{main}:" in w for w in said)
    policy = compile_policy(cfg.patterns)
    # CRI-O compiles them to ^$ and ^  $: they pin no name at all.
    assert policy.matcher.match(["registry.example/a", " ", "x"]) == [[0], [], []]


def test_a_lone_star_is_still_refused(main: pathlib.Path) -> None:
    write(main, '[crio.image]\npinned_images = ["*"]\n')
    cfg = load(from_crio=str(main))
    with pytest.raises(PatternError, match="CRI-O crashes on a lone"):
        compile_policy(cfg.patterns)
    assert any("crash" in w for w in read_crio_config(str(main)).warnings)


def test_wrong_types_are_errors_naming_file_and_line(main: pathlib.Path) -> None:
    write(main, '[crio.image]\n\npinned_images = [1]\n')
    with pytest.raises(ConfigError, match=f"^{main}:3: key 'pinned_images' must be a list of strings, item 1"):
        read_crio_config(str(main))
    write(main, '[crio.image]\npause_image = 3\n')
    with pytest.raises(ConfigError, match=f"^{main}:2: key 'pause_image' must be a string"):
        read_crio_config(str(main))


def test_own_dropin_round_trip(main: pathlib.Path) -> None:
    d = dropins(main)
    site = write(d / "10-site.conf", '[crio.image]\npinned_images = [\n  "site.example/a",\n  "site.example/b*",\n]\n')
    first = read_crio_config(str(main))
    text = render_dropin(first.site_entries, [("pin.example/p:1", "pin"), ("sync.example/*", "sync"),
                                             ("site.example/a", "pin")])
    assert tomllib.loads(text)["crio"]["image"]["pinned_images"] == [
        "site.example/a", "site.example/b*", "pin.example/p:1", "sync.example/*"]
    assert f"# site: {site}:3" in text and "# pinctl: pin" in text and "# pinctl: sync" in text
    assert "systemctl reload crio" in text and "kill -HUP" in text
    write_dropin(os.path.join(first.dropin_dir, PINCTL_DROPIN_NAME), text)
    again = read_crio_config(str(main))
    dropin = again.dropin_path
    assert again.pinned_from == dropin
    assert [(e.text, e.owner) for e in again.pinned_images] == [
        ("site.example/a", "site"), ("site.example/b*", "site"), ("pin.example/p:1", "pin"), ("sync.example/*", "sync")]
    # The carried-over copies are not the drop-in's own, and the site's list still comes from its file.
    assert [(e.text, e.owner, e.path) for e in again.own_entries] == [
        ("pin.example/p:1", "pin", dropin), ("sync.example/*", "sync", dropin)]
    assert again.site_entries == first.site_entries
    assert again.own_entries[0].line == 9  # four header lines, [crio.image], the key, two site items


def test_hand_edited_dropin_is_read_and_its_plain_items_are_the_sites(main: pathlib.Path) -> None:
    dropin = write(dropins(main) / PINCTL_DROPIN_NAME,
                   '[crio.image]\npinned_images = [\n  "hand.example/x",\n  "own.example/y",  # pinctl: sync\n]\n')
    found = read_crio_config(str(main))
    assert [(e.text, e.owner) for e in found.own_entries] == [("own.example/y", "sync")]
    assert [(e.text, e.where) for e in found.site_entries] == [
        ("registry.example/main:1", f"{main}:3"), ("hand.example/x", f"{dropin}:3")]


def test_files_after_pinctls_dropin_override_it(main: pathlib.Path) -> None:
    d = dropins(main)
    write(d / PINCTL_DROPIN_NAME, render_dropin([], [("p.example/a", "pin")]))
    later = write(d / "zzz-late.conf", '[crio.image]\npinned_images = ["late.example/x"]\n')
    write(d / "zzz-dir" / "a.conf", '[crio.image]\npause_image = "p.example/pause:1"\n')
    nested = write(d / "zzzz" / "b.conf", '[crio.image]\npinned_images = ["late.example/y"]\n')
    found = read_crio_config(str(main))
    assert found.overriding == (later, nested)
    assert found.pinned_from == nested
    assert [e.text for e in found.own_entries] == ["p.example/a"]
    assert [e.text for e in found.site_entries] == ["late.example/y"]


def test_render_dropin_is_valid_toml_for_any_text() -> None:
    odd = ['quote"d', "back\\slash", "tab\tand\x7fdel", "é/ü:1", "emoji😀", "", "#hash", "a,b ]"]
    site = [CrioEntry("s.example/a", "/etc/crio/crio.conf.d/10\nx.conf", 2)]
    text = render_dropin(site, [(t, "pin") for t in odd] + [("s.example/a", "sync")])
    assert tomllib.loads(text)["crio"]["image"]["pinned_images"] == ["s.example/a", *odd]


def test_render_dropin_items_read_back_with_their_owner(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "c" / "crio.conf"
    odd = ['quote"d', "#hash", "x # pinctl: sync"]
    write(dropins(main) / PINCTL_DROPIN_NAME, render_dropin([], [(t, "pin") for t in odd]))
    found = read_crio_config(str(main))
    assert [(e.text, e.owner) for e in found.own_entries] == [(t, "pin") for t in odd]


def test_write_dropin_is_atomic_and_world_readable(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "crio.conf.d" / PINCTL_DROPIN_NAME
    old = os.umask(0o077)
    try:
        write_dropin(str(path), "[crio.image]\n")
        write_dropin(str(path), "[crio.image]\npinned_images = []\n")
    finally:
        os.umask(old)
    assert path.read_text() == "[crio.image]\npinned_images = []\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    assert os.listdir(path.parent) == [PINCTL_DROPIN_NAME]


def test_write_dropin_without_permission_says_run_as_root(tmp_path: pathlib.Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Root writes anyway, so the refusal a non-root operator meets is made here: the rename fails.
    def refuse(_source: str, _target: str) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    target = tmp_path / "crio.conf.d" / PINCTL_DROPIN_NAME
    with pytest.raises(PinctlError) as info:
        write_dropin(str(target), "x")
    assert str(info.value) == f"cannot write CRI-O drop-in {target}: permission denied (run as root (sudo))"
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]  # no temp file left


@needs_root
def test_files_others_can_change_are_refused_as_root(main: pathlib.Path, as_root: None) -> None:
    os.chown(main, NOBODY, NOBODY)
    with pytest.raises(ConfigError, match=f"^refusing {main}: "):
        read_crio_config(str(main))


def test_loader_keeps_using_it(main: pathlib.Path) -> None:
    from pinctl.config import loader

    assert loader.CRIO_DEFAULT_PATH == crio.CRIO_DEFAULT_PATH or loader.CRIO_DEFAULT_PATH.endswith("crio.conf")
    assert [p.text for p in load(from_crio=str(main)).patterns] == ["registry.example/main:1"]

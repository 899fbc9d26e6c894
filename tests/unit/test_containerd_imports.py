"""containerd's config read with its imports, as containerd 2.1 reads them: breadth first, globs in
byte order, paths relative to the file naming them, a cycle ended, tables merged key by key, the
version 2 sandbox_image moved only when the merged version is below 3; and one line naming the
file when an import is missing, broken or a malformed glob. What containerd 2.1 itself does with
such files is asserted in tests/integration/test_containerd_imports.py."""

from __future__ import annotations

import pathlib

import pytest

from pinctl.config import containerd as ctd
from pinctl.config.containerd import (MIGRATE_EACH_FILE, REPLACE_SECTIONS, go_glob, go_match, read_config_pins,
                                      read_config_version, read_containerd_config, read_sandbox_image)
from pinctl.errors import ConfigError
from pinctl.model import ConfigPin

PINNED = "[plugins.'io.containerd.cri.v1.images'.pinned_images]"
IMAGES = "[plugins.'io.containerd.cri.v1.images']"


def write(path: pathlib.Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def entries(path: str, rules: str = ctd.MERGE_2_1) -> dict[str, tuple[str, str]]:
    read = read_containerd_config(path, rules)
    assert read is not None
    return {pin.name: (pin.ref, pin.path) for pin in read.pins}


def test_an_imported_entry_joins_the_main_files_and_names_its_file_and_line(tmp_path: pathlib.Path) -> None:
    main = write(tmp_path / "config.toml", f"version = 3\nimports = ['conf.d/*.toml']\n{PINNED}\n"
                                           "  sandbox = 'example.test/pause:1'\n  main = 'example.test/main:1'\n")
    site = write(tmp_path / "conf.d" / "10-site.toml", f"version = 3\n\n{PINNED}\n  site = 'example.test/site:1'\n")
    assert read_config_pins(main) == [ConfigPin("sandbox", "example.test/pause:1", main, 4),
                                      ConfigPin("main", "example.test/main:1", main, 5),
                                      ConfigPin("site", "example.test/site:1", site, 4)]
    assert read_config_pins(main)[2].where == f"pinned_images.site in {site}:4"
    assert read_sandbox_image(main) == "example.test/pause:1"
    assert read_config_version(main) == (main, 3)


def test_an_import_setting_another_key_of_the_plugin_leaves_the_entries(tmp_path: pathlib.Path) -> None:
    main = write(tmp_path / "config.toml", f"version = 3\nimports = ['more.toml']\n{PINNED}\n  main = 'example.test/m:1'\n")
    write(tmp_path / "more.toml", f"version = 3\n{IMAGES}\n  max_concurrent_downloads = 7\n")
    assert entries(main) == {"main": ("example.test/m:1", main)}
    # containerd 1.x replaces a plugin's whole table instead.
    assert entries(main, REPLACE_SECTIONS) == {}


def test_a_later_file_overrides_an_entry_which_keeps_its_place(tmp_path: pathlib.Path) -> None:
    main = write(tmp_path / "config.toml", f"version = 3\nimports = ['b.toml']\n{PINNED}\n  a = 'x.test/a:1'\n  b = 'x.test/b:1'\n")
    other = write(tmp_path / "b.toml", "version = 3\n[plugins.'io.containerd.cri.v1.images']\n"
                                       "pinned_images.a = 'x.test/a:2'\n")
    assert [(p.name, p.ref, p.path, p.line) for p in read_config_pins(main)] == [
        ("a", "x.test/a:2", other, 3), ("b", "x.test/b:1", main, 5)]


def test_files_load_breadth_first_and_a_cycle_ends(tmp_path: pathlib.Path) -> None:
    main = write(tmp_path / "config.toml", "version = 3\nimports = ['a.toml', 'b.toml']\n")
    write(tmp_path / "a.toml", f"version = 3\nimports = ['c.toml', 'config.toml']\n{PINNED}\n  x = 'x.test/from-a:1'\n")
    write(tmp_path / "b.toml", f"version = 3\nimports = ['d.toml', 'a.toml']\n{PINNED}\n  x = 'x.test/from-b:1'\n")
    write(tmp_path / "c.toml", f"version = 3\n{PINNED}\n  x = 'x.test/from-c:1'\n")
    write(tmp_path / "d.toml", "version = 3\n")
    read = read_containerd_config(main)
    assert read is not None
    assert read.files == [main, *(str(tmp_path / f"{n}.toml") for n in "abcd")]
    # c is merged after b (breadth first): its entry wins.
    assert entries(main) == {"x": ("x.test/from-c:1", str(tmp_path / "c.toml"))}


def test_globs_expand_in_byte_order_dotfiles_included_and_relative_to_the_naming_file(tmp_path: pathlib.Path) -> None:
    main = write(tmp_path / "config.toml", "version = 3\nimports = ['sub/first.toml']\n")
    write(tmp_path / "sub" / "first.toml", "version = 3\nimports = ['d/*.toml', 'none/*.toml']\n")
    names = ["20-b.toml", "10-a.toml", ".0-hidden.toml", "B.toml", "notes.txt"]
    for name in names:
        write(tmp_path / "sub" / "d" / name, f"version = 3\n{PINNED}\n  last = 'x.test/{name.lower()}:1'\n")
    read = read_containerd_config(main)
    assert read is not None
    d = tmp_path / "sub" / "d"
    assert read.files == [main, str(tmp_path / "sub" / "first.toml"),
                          *(str(d / n) for n in [".0-hidden.toml", "10-a.toml", "20-b.toml", "B.toml"])]
    assert entries(main)["last"] == ("x.test/b.toml:1", str(d / "B.toml"))


def test_go_glob_and_match_follow_go(tmp_path: pathlib.Path) -> None:
    for name in ["a1", "a2", "b1", "[x"]:
        (tmp_path / name).write_text("")
    assert go_glob(str(tmp_path / "a*")) == [str(tmp_path / "a1"), str(tmp_path / "a2")]
    assert go_glob(str(tmp_path / "[^a]*")) == [str(tmp_path / "[x"), str(tmp_path / "b1")]
    assert go_glob(str(tmp_path / "\\[*")) == [str(tmp_path / "[x")]
    assert go_glob(str(tmp_path / "*" / "x")) == []
    assert go_match("[!a]", "!") and not go_match("[!a]", "b")  # "!" is no negation in Go
    assert go_match("?.toml", ".toml") is False and go_match("*.toml", ".a.toml")
    for bad in ["[", "[]", "a\\", "[z-a]"]:
        with pytest.raises(ValueError):
            go_match(bad, "x")


def test_a_missing_import_is_one_line_naming_both_files(tmp_path: pathlib.Path) -> None:
    main = write(tmp_path / "config.toml", "version = 3\nimports = ['gone.toml', 'none-*.toml']\n")
    with pytest.raises(ConfigError) as err:
        read_config_pins(main)
    text = str(err.value)
    assert f"{tmp_path / 'gone.toml'} does not exist" in text and f"imported by {main}" in text
    assert "\n" not in text and "containerd does not start" in err.value.hint


def test_a_missing_import_of_the_default_config_is_an_error_too(tmp_path: pathlib.Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    default = write(tmp_path / "config.toml", "version = 3\nimports = ['/nonexistent-pinctl/x.toml']\n")
    monkeypatch.setattr(ctd, "DEFAULT_CONFIG", default)
    with pytest.raises(ConfigError, match="/nonexistent-pinctl/x.toml"):
        read_sandbox_image(None)


@pytest.mark.parametrize("text, said", [
    ("version = 3\n[plugins\n", "is not valid TOML"),
    ("version = 3\nimports = 'x.toml'\n", "imports is not a list of paths"),
    ("version = 3\nimports = ['[*.toml']\n", "malformed glob"),
])
def test_a_broken_import_is_one_line_naming_it(tmp_path: pathlib.Path, text: str, said: str) -> None:
    main = write(tmp_path / "config.toml", "version = 3\nimports = ['conf.d/*.toml']\n")
    broken = write(tmp_path / "conf.d" / "x.toml", text)
    with pytest.raises(ConfigError) as err:
        read_config_pins(main)
    assert broken in str(err.value) and said in str(err.value) and "\n" not in str(err.value)


def test_a_version_2_import_moves_its_sandbox_image_over_the_main_files(tmp_path: pathlib.Path) -> None:
    main = write(tmp_path / "config.toml", f"version = 3\nimports = ['v2.toml']\n{PINNED}\n"
                                           "  sandbox = 'x.test/pause:1'\n  keep = 'x.test/keep:1'\n")
    v2 = write(tmp_path / "v2.toml", "version = 2\n[plugins.'io.containerd.grpc.v1.cri']\n  sandbox_image = 'x.test/pause:2'\n")
    for rules in (ctd.MERGE_2_1, MIGRATE_EACH_FILE):
        read = read_containerd_config(main, rules)
        assert read is not None and read.sandbox == ("x.test/pause:2", v2)
        # The moved sandbox_image is the sandbox image, not an entry written in pinned_images.
        assert [pin.name for pin in read.pins] == ["keep"]


def test_containerd_21_moves_sandbox_image_only_when_the_merged_version_is_below_3(tmp_path: pathlib.Path) -> None:
    """A version 2 import followed by a version 3 one, and a version-less import: 2.1 leaves their
    sandbox_image where it is (and ignores it); its later source moves each file's on its own."""
    main = write(tmp_path / "config.toml", f"version = 3\nimports = ['v2.toml', 'v3.toml']\n{PINNED}\n  sandbox = 'x.test/pause:1'\n")
    v2 = write(tmp_path / "v2.toml", "version = 2\n[plugins.'io.containerd.grpc.v1.cri']\n  sandbox_image = 'x.test/pause:2'\n")
    write(tmp_path / "v3.toml", "version = 3\n")
    assert read_containerd_config(main).sandbox == ("x.test/pause:1", main)  # type: ignore[union-attr]
    assert read_containerd_config(main, MIGRATE_EACH_FILE).sandbox == ("x.test/pause:2", v2)  # type: ignore[union-attr]
    write(tmp_path / "v2.toml", "[plugins.cri]\n  sandbox_image = 'x.test/pause:0'\n")
    assert read_containerd_config(main).sandbox == ("x.test/pause:1", main)  # type: ignore[union-attr]
    assert read_containerd_config(main, MIGRATE_EACH_FILE).sandbox == ("x.test/pause:0", v2)  # type: ignore[union-attr]


def test_the_version_is_the_main_files(tmp_path: pathlib.Path) -> None:
    main = write(tmp_path / "config.toml", "version = 2\nimports = ['v3.toml']\n")
    write(tmp_path / "v3.toml", "version = 3\n")
    read = read_containerd_config(main)
    assert read is not None and read.version == 2 and read_config_version(main) == (main, 2)
    assert read_containerd_config(write(tmp_path / "none.toml", "")).version == 1  # type: ignore[union-attr]


@pytest.mark.parametrize("version, rules", [
    ("1.7.24~ds1", REPLACE_SECTIONS), ("1.6.20~ds1", REPLACE_SECTIONS), ("2.1.9~ds1", ctd.MERGE_2_1),
    ("v2.0.0", ctd.MERGE_2_1), ("v2.2.9", ctd.MERGE_2_1), ("v2.3.0", MIGRATE_EACH_FILE),
    ("v2.4.2", MIGRATE_EACH_FILE), ("v3.0.0-rc.1", MIGRATE_EACH_FILE), ("", ctd.NOT_KNOWN), (None, ctd.NOT_KNOWN)])
def test_the_merge_rules_follow_the_daemons_release(version: str | None, rules: str) -> None:
    """2.3 moved the migration of an old file's settings before the merge (each file on its own)."""
    assert ctd.rules_for(version) == rules


@pytest.mark.parametrize("imports, found", [
    ("['/etc/containerd/conf.d/*.toml']", ("/etc/containerd/conf.d/99-pinctl.toml", "/etc/containerd/conf.d/*.toml")),
    ("['conf.d/*.conf']", ("{dir}/conf.d/99-pinctl.conf", "conf.d/*.conf")),
    ("['/x/one.toml', 'd/*']", ("{dir}/d/99-pinctl.toml", "d/*")),
    ("['/x/one.toml']", None), ("['/x/*/a.toml']", None), ("['/x/?.toml']", None), ("[]", None)])
def test_a_drop_in_goes_into_the_first_directory_the_imports_glob(tmp_path: pathlib.Path, imports: str,
                                                                   found: tuple[str, str] | None) -> None:
    main = write(tmp_path / "config.toml", f"version = 3\nimports = {imports}\n")
    want = None if found is None else (found[0].format(dir=tmp_path), found[1])
    assert ctd.dropin_path(main) == want


def test_no_drop_in_without_a_config(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctd, "DEFAULT_CONFIG", str(tmp_path / "absent.toml"))
    assert ctd.dropin_path(None) is None


def test_a_sandbox_image_a_2x_merge_leaves_unmoved_is_no_sandbox_image(tmp_path: pathlib.Path) -> None:
    """A version 2 main file importing a version 3 one: 2.0 to 2.2 leave its sandbox_image where it
    is, and ignore it (tests/integration/test_containerd_merge_rules.py); 2.3 on moves it."""
    main = write(tmp_path / "config.toml", "version = 2\nimports = ['v3.toml']\n"
                                           "[plugins.'io.containerd.grpc.v1.cri']\n  sandbox_image = 'x.test/pause:1'\n")
    write(tmp_path / "v3.toml", "version = 3\n")
    assert read_sandbox_image(main, ctd.MERGE_2_1) is None
    assert read_sandbox_image(main, MIGRATE_EACH_FILE) == "x.test/pause:1"
    assert read_sandbox_image(main, REPLACE_SECTIONS) == "x.test/pause:1"
    assert read_sandbox_image(main) == "x.test/pause:1"  # the release not known: wherever one reads it

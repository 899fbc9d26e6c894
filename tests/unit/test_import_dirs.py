"""Which files of an import directory are archives, and what a directory that cannot be read
gives (the rest is against real containerd, tests/integration/test_import_dirs.py)."""

from __future__ import annotations

import os
import pathlib

from pinctl.imports.dirs import scan, stamp_of


def test_only_archives_by_name_are_read_and_hidden_or_partial_files_are_not(tmp_path: pathlib.Path) -> None:
    for name in ("b.tar", "a.tar.gz", "c.tar.zst", "d.tgz", "e.tzst", "notes.txt", ".f.tar", "g.tar.partial"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "h.tar").mkdir()
    found = scan([str(tmp_path)], "k8s.io")
    assert [os.path.basename(a.path) for a in found.archives] == ["a.tar.gz", "b.tar", "c.tar.zst", "d.tgz", "e.tzst"]
    assert found.readable == {str(tmp_path)} and found.failed == []
    assert found.archives[1].stamp == stamp_of(os.stat(tmp_path / "b.tar"))


def test_a_missing_directory_is_a_failure_and_not_readable(tmp_path: pathlib.Path) -> None:
    found = scan([str(tmp_path / "nope"), str(tmp_path / "nope")], "k8s.io")
    assert [(i.action, i.why) for i in found.failed] == [("failed", f"import directory {tmp_path / 'nope'} does not exist")]
    assert found.readable == set()


def test_a_new_version_has_a_new_stamp(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.tar"
    path.write_bytes(b"one")
    before = stamp_of(os.stat(path))
    replacement = tmp_path / ".a.tar.new"
    replacement.write_bytes(b"two")
    os.replace(replacement, path)
    assert stamp_of(os.stat(path)) != before

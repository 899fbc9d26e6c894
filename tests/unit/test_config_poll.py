"""Noticing a changed config without SIGHUP (pinctl.service.configfiles): what is polled, and what
counts as a change, on a plain directory and on one shaped like a Kubernetes ConfigMap volume."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import IO

from pinctl.config import loader
from pinctl.service import configfiles
from pinctl.service.configfiles import ConfigPoll, fingerprint, watched_paths
from tests.harness.configmap import ConfigMapVolume

POLICY = 'pinned_images = ["example.test/a/*"]\n'


def configmap(root: Path) -> ConfigMapVolume:
    """The kubelet's layout; its directory 0755 here rather than an emptyDir's 0777, which pinctl
    as root accepts only on a read-only mount (tests/integration/test_watch_fleet.py has that)."""
    return ConfigMapVolume(root, root_mode=0o755)


def config_of(main: Path) -> loader.Config:
    return loader.load({}, {}, config_path=str(main))


def poll_of(paths: tuple[str, ...]) -> tuple[ConfigPoll, list[str]]:
    seen: list[str] = []
    poll = ConfigPoll(lambda: paths, seen.append, interval=3600, settle=0.01, settle_max=0.05)
    poll.rebase()  # no thread: the test turns it
    return poll, seen


def test_polled_paths_are_the_main_file_its_dropins_and_every_file_read(tmp_path: Path) -> None:
    main = tmp_path / "config.toml"
    main.write_text(POLICY)
    (tmp_path / "config.d").mkdir()
    (tmp_path / "config.d" / "team.toml").write_text('pinned_images = ["example.test/b/*"]\n')
    assert watched_paths(config_of(main)) == (str(main), str(tmp_path / "config.d"),
                                              str(tmp_path / "config.d" / "team.toml"))


def test_without_a_main_file_the_default_one_is_polled_for_when_it_appears() -> None:
    cfg = loader.Config(loader.load({}, {}, config_path=None).settings, {}, [], [])
    default = loader.DEFAULT_PATH
    assert watched_paths(cfg)[:2] == (default, os.path.join(os.path.dirname(default), loader.DROPIN_DIR))
    dropin = os.path.join(os.path.dirname(default), loader.DROPIN_DIR, "a.toml")
    cfg = loader.Config(cfg.settings, {}, [], [dropin])
    assert watched_paths(cfg)[0] == default and dropin in watched_paths(cfg)


def test_an_edit_in_place_a_new_dropin_and_a_removed_one_are_changes(tmp_path: Path) -> None:
    main = tmp_path / "config.toml"
    main.write_text(POLICY)
    poll, seen = poll_of(watched_paths(config_of(main)))
    assert not poll.turn()
    main.write_text(POLICY + "# more\n")
    assert poll.turn() and seen == [str(main)]
    assert not poll.turn(), "a change is reported once"
    (tmp_path / "config.d").mkdir()
    assert poll.turn() and seen[-1] == str(tmp_path / "config.d")
    poll, seen = poll_of(watched_paths(config_of(main)))
    (tmp_path / "config.d" / "team.toml").write_text(POLICY)
    assert poll.turn() and seen == [str(tmp_path / "config.d")]
    poll, seen = poll_of(watched_paths(config_of(main)))
    (tmp_path / "config.d" / "team.toml").unlink()
    assert poll.turn()


def test_a_file_replaced_by_rename_and_a_mode_change_are_changes(tmp_path: Path) -> None:
    main = tmp_path / "config.toml"
    main.write_text(POLICY)
    poll, seen = poll_of(watched_paths(config_of(main)))
    staged = tmp_path / ".config.toml.new"
    staged.write_text(POLICY)  # the same bytes, a new file: an editor's save
    os.utime(staged, ns=(main.stat().st_atime_ns, main.stat().st_mtime_ns))
    os.rename(staged, main)
    assert poll.turn()
    main.chmod(0o666)  # StrictModes refuses it now: the reload must find out
    assert poll.turn()


def test_other_files_beside_the_main_one_are_not_changes(tmp_path: Path) -> None:
    main = tmp_path / "config.toml"
    main.write_text(POLICY)
    poll, _seen = poll_of(watched_paths(config_of(main)))
    (tmp_path / "watch.log").write_text("a log line\n")
    (tmp_path / "images.tar").write_bytes(b"\0" * 10)
    assert not poll.turn()


def test_a_configmap_update_is_a_change_though_no_path_read_is_written(tmp_path: Path) -> None:
    volume = configmap(tmp_path / "pinctl")
    volume.write({"config.toml": POLICY})
    main = volume.root / "config.toml"
    poll, seen = poll_of(watched_paths(config_of(main)))
    assert not poll.turn()
    before = main.lstat()
    volume.write({"config.toml": POLICY})  # the same content, as a new generation
    assert (main.lstat().st_ino, main.lstat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns), \
        "the path itself is untouched: only what it resolves to changed"
    assert poll.turn() and seen == [str(main)]
    assert not poll.turn()


def test_a_configmap_with_dropins_shows_a_new_one(tmp_path: Path) -> None:
    volume = configmap(tmp_path / "pinctl")
    volume.write({"config.toml": POLICY, "config.d/a.toml": POLICY})
    main = volume.root / "config.toml"
    cfg = config_of(main)
    assert str(volume.root / "config.d" / "a.toml") in cfg.files
    poll, seen = poll_of(watched_paths(cfg))
    volume.write({"config.toml": POLICY, "config.d/a.toml": POLICY, "config.d/b.toml": POLICY})
    assert poll.turn()
    assert len(config_of(main).files) == 3


def test_a_dangling_symlink_is_nothing_there(tmp_path: Path) -> None:
    link = tmp_path / "config.toml"
    link.symlink_to("..data/config.toml")
    assert fingerprint([str(link)]) == ((str(link), None),)
    (tmp_path / "..data").mkdir()
    (tmp_path / "..data" / "config.toml").write_text(POLICY)
    assert fingerprint([str(link)])[0][1] is not None


def test_a_write_still_going_on_is_waited_for(tmp_path: Path) -> None:
    """A writer adds a line each time the poll looks again (the poll's paths callable is the hook),
    so the write is still going on at every look, whatever the machine's speed: the poll calls
    back only once it stops, with the whole file there."""
    main = tmp_path / "config.toml"
    main.write_text(POLICY)
    pending: list[str] = []
    writer: list[IO[str]] = []

    def paths() -> list[str]:
        if pending:
            writer[0].write(pending.pop(0))
            writer[0].flush()
            if not pending:
                writer[0].close()
        return [str(main)]

    sizes: list[int] = []
    poll = ConfigPoll(paths, lambda _path: sizes.append(main.stat().st_size), interval=3600, settle=0.01,
                      settle_max=3600)
    poll.rebase()
    writer.append(open(main, "w"))  # an editor's or a `cat >` write, begun
    pending.extend(["# ...\n"] * 6 + [POLICY])
    assert poll.turn()
    assert writer[0].closed and sizes == [len("# ...\n") * 6 + len(POLICY)], "called once the writes stopped"


def test_the_thread_calls_back_and_stops_at_once(tmp_path: Path) -> None:
    main = tmp_path / "config.toml"
    main.write_text(POLICY)
    called = threading.Event()
    poll = ConfigPoll(lambda: [str(main)], lambda _path: called.set(), interval=0.05, settle=0.01)
    poll.start()
    main.write_text(POLICY * 2)
    assert called.wait(60)
    poll.stop()
    # At once: a poll whose next look is an hour away ends when stopped, long before that hour.
    idle = ConfigPoll(lambda: [str(main)], lambda _path: None, interval=3600)
    idle.start()
    thread = idle._thread
    assert thread is not None and thread.is_alive()
    idle.stop()
    thread.join(60)
    assert not thread.is_alive()


def test_a_new_dropin_reloads_once_though_the_reload_adds_it_to_the_paths(tmp_path: Path) -> None:
    main = tmp_path / "config.toml"
    main.write_text(POLICY)
    (tmp_path / "config.d").mkdir()
    current = [watched_paths(config_of(main))]
    seen: list[str] = []
    poll = ConfigPoll(lambda: current[0], seen.append, interval=3600, settle=0.01)
    poll.rebase()
    (tmp_path / "config.d" / "team.toml").write_text(POLICY)
    assert poll.turn() and seen == [str(tmp_path / "config.d")]
    current[0] = watched_paths(config_of(main))  # what the reload read
    assert str(tmp_path / "config.d" / "team.toml") in current[0]
    assert not poll.turn(), "the reload already read it"
    (tmp_path / "config.d" / "team.toml").write_text(POLICY + "# edited\n")
    assert poll.turn() and seen[-1] == str(tmp_path / "config.d" / "team.toml")


def test_the_docs_give_the_bound_the_poll_keeps() -> None:
    """docs/policy.md and deploy/kubernetes/README.md tell operators a change is read within 3 s."""
    root = Path(__file__).resolve().parents[2]
    assert configfiles.POLL_SECONDS + configfiles.SETTLE_SECONDS <= 3.0
    for doc in (root / "docs" / "policy.md", root / "deploy" / "kubernetes" / "README.md"):
        assert "within 3 s" in " ".join(doc.read_text().split()), doc

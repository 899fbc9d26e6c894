"""The target cache (backends/targets.py): answers read once are kept by digest, in memory and in
a file; a file that is corrupt, foreign or made for another platform is ignored and written anew;
the file stays bounded; a service does not write it at every event."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pinctl.backends import targets
from pinctl.backends.targets import TargetCache
from pinctl.model import ResolvedTarget


def digest(n: int, kind: str = "a") -> str:
    return "sha256:" + f"{kind}{n:063x}"[-64:]


class Reader:
    """Stands for the manifest reads: records what it was asked for."""

    def __init__(self, failing: frozenset[str] = frozenset()) -> None:
        self.asked: list[list[str]] = []
        self.failing = failing

    def __call__(self, digests: list[str]) -> dict[str, ResolvedTarget]:
        self.asked.append(list(digests))
        return {d: ResolvedTarget(None, 0, "content missing") if d in self.failing
                else ResolvedTarget(d.replace("sha256:a", "sha256:c"), 100 + len(self.asked)) for d in digests}


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "cache" / targets.CACHE_FILE)


def test_an_answer_is_read_once_then_kept_and_a_failure_is_not(path: str) -> None:
    read = Reader(failing=frozenset({digest(2)}))
    cache = TargetCache(path)
    first = cache.resolve([digest(1), digest(2)], read)
    assert first[digest(2)].error == "content missing"
    second = cache.resolve([digest(1), digest(2)], read)
    assert read.asked == [[digest(1), digest(2)], [digest(2)]]
    assert second[digest(1)] == first[digest(1)] == ResolvedTarget(digest(1).replace("sha256:a", "sha256:c"), 101)


def test_the_next_run_reads_nothing_it_read_before(path: str) -> None:
    TargetCache(path).resolve([digest(1), digest(2)], Reader())
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    read = Reader()
    found = TargetCache(path).resolve([digest(1), digest(2), digest(3)], read)
    assert read.asked == [[digest(3)]]
    assert found[digest(1)].size == 101 and found[digest(3)].size == 101


def test_again_reads_and_drops_an_answer_that_now_fails(path: str) -> None:
    cache = TargetCache(path)
    cache.resolve([digest(1)], Reader())
    again = cache.resolve([digest(1)], Reader(failing=frozenset({digest(1)})), again=True)
    assert again[digest(1)].error == "content missing"
    read = Reader()
    TargetCache(path).resolve([digest(1)], read)
    assert read.asked == [[digest(1)]], "the dropped answer was not kept in the file either"


def write_raw(path: str, document: object) -> None:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    Path(path).write_text(json.dumps(document))
    os.chmod(path, 0o600)


GOOD_ENTRY = [digest(9, "c"), 5, 0]


@pytest.mark.parametrize("document, why", [
    ("not json at all", "not JSON"),
    ({"version": 2, "platform": targets.platform_key(), "entries": {}}, "not a version 1"),
    ({"version": 1, "platform": "plan9/mips/", "entries": {}}, "made for platform 'plan9/mips/'"),
    ({"version": 1, "platform": targets.platform_key(), "entries": {digest(1): [digest(9, "c"), -5, 0]}},
     "is not a digest with an image ID"),
    ({"version": 1, "platform": targets.platform_key(), "entries": {"sha256:short": GOOD_ENTRY}},
     "is not a digest with an image ID"),
    ({"version": 1, "platform": targets.platform_key(), "entries": {digest(1): ["latest", 5, 0]}},
     "is not a digest with an image ID"),
    ({"version": 1, "platform": targets.platform_key(), "entries": {digest(1): [digest(9, "c"), True, 0]}},
     "is not a digest with an image ID"),
])
def test_a_corrupt_file_is_ignored_whole_and_written_anew(path: str, document: object, why: str) -> None:
    write_raw(path, document)
    if isinstance(document, str):
        Path(path).write_text(document)
    read = Reader()
    cache = TargetCache(path)
    found = cache.resolve([digest(1)], read)
    assert read.asked == [[digest(1)]] and found[digest(1)].size == 101
    assert cache.ignored is not None and why in cache.ignored, cache.ignored
    reread = Reader()
    TargetCache(path).resolve([digest(1)], reread)
    assert reread.asked == [], "the file written in its place is a good one"


def test_a_good_file_is_used(path: str) -> None:
    write_raw(path, {"version": 1, "platform": targets.platform_key(), "entries": {digest(1): GOOD_ENTRY}})
    read = Reader()
    assert TargetCache(path).resolve([digest(1)], read)[digest(1)] == ResolvedTarget(digest(9, "c"), 5)
    assert read.asked == []


@pytest.mark.skipif(os.geteuid() != 0, reason="the ownership rules are root's")
def test_as_root_a_file_others_could_write_is_not_trusted_and_is_replaced(path: str) -> None:
    write_raw(path, {"version": 1, "platform": targets.platform_key(), "entries": {digest(1): GOOD_ENTRY}})
    os.chmod(path, 0o666)
    read = Reader()
    cache = TargetCache(path)
    assert cache.resolve([digest(1)], read)[digest(1)].size == 101
    assert read.asked == [[digest(1)]] and cache.ignored is not None and "writable by a user other than root" in cache.ignored
    assert os.stat(path).st_mode & 0o777 == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="the ownership rules are root's")
def test_as_root_nothing_is_written_in_a_directory_others_can_write(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    path = str(shared / targets.CACHE_FILE)
    TargetCache(path).resolve([digest(1)], Reader())
    assert not os.path.exists(path)


def test_the_file_stays_bounded_and_keeps_what_was_seen_last(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(targets, "MAX_ENTRIES", 3)
    monkeypatch.setattr(targets, "SAVE_SECONDS", 0.0)
    now = [1000.0]
    cache = TargetCache(path, clock=lambda: now[0])
    for n in range(1, 6):
        now[0] += 10
        cache.resolve([digest(n)], Reader())
    assert len(cache) == 3
    read = Reader()
    TargetCache(path).resolve([digest(n) for n in range(1, 6)], read)
    assert read.asked == [[digest(1), digest(2)]], "the two seen longest ago went"
    big = TargetCache(path, clock=lambda: now[0])
    big.resolve([digest(n) for n in range(1, 8)], Reader())
    assert len(big) == 7, "never fewer than the listing just made"


def test_a_service_writes_at_most_every_so_often(path: str) -> None:
    ticks = [0.0]
    cache = TargetCache(path, monotonic=lambda: ticks[0])
    cache.resolve([digest(1)], Reader())
    os.utime(path, ns=(0, 0))
    ticks[0] += 1
    cache.resolve([digest(2)], Reader())
    assert os.stat(path).st_mtime_ns == 0, "one new answer a second after the last write waits"
    cache.resolve([digest(n) for n in range(10, 10 + targets.SAVE_BATCH)], Reader())
    assert os.stat(path).st_mtime_ns != 0, "many at once are written"
    os.utime(path, ns=(0, 0))
    ticks[0] += targets.SAVE_SECONDS
    cache.resolve([digest(3)], Reader())
    assert os.stat(path).st_mtime_ns != 0, "and one is, once SAVE_SECONDS have passed"


def test_where_the_file_is(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(targets.CACHE_DIR_ENV, str(tmp_path))
    assert targets.default_cache_path() == str(tmp_path / targets.CACHE_FILE)
    monkeypatch.setenv(targets.CACHE_DIR_ENV, "")
    assert targets.default_cache_path() is None
    assert TargetCache(None).resolve([digest(1)], Reader())[digest(1)].size == 101

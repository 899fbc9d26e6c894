"""The service functions behind each command, in-process over the fake store: what they return
and the exit code it carries. Engine behaviour is tested against real engines elsewhere."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Optional

import pytest

from pinctl.commands import check, config, ls, pin, sync
from pinctl.backends.cri import CriImage, RuntimeVersion
from pinctl.config.loader import Config, PatternEntry
from pinctl.config.settings import Settings
from pinctl.errors import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, EngineError, UsageError
from pinctl.model import PIN_LABEL, ConfigPin, StoredImage
from pinctl.node.sources import ContainerdSource, Node
from pinctl.pins import listing
from pinctl.pins.policy import Policy, compile_policy

from .fakes import FakeStore, digest

PIN = {PIN_LABEL: "pinned"}
RUNTIME = RuntimeVersion("containerd", "1.7.24", "v1")


def node_of(store: FakeStore, *namespaces: str) -> Node:
    return Node([ContainerdSource(store, list(namespaces or ["k8s.io"]))])


def store_with_images() -> FakeStore:
    store = FakeStore()
    store.add("k8s.io", "example.test/app:1", "a", PIN)
    store.add("k8s.io", "example.test/bee:1", "b")
    store.add("k8s.io", "sha256:" + "b" * 64, "b")
    return store


def policy_of(*patterns: str) -> Policy:
    return compile_policy([PatternEntry(p, "test", "pinctl") for p in patterns])


def test_ls_filters_and_names_need_no_manifests() -> None:
    store = store_with_images()
    node = node_of(store)
    pinned = ls.ls(node, Policy(), ls.LsQuery(pinned=True))
    assert [row.ref for row in pinned.rows] == ["example.test/app:1"]
    assert ls.ls_names(node) == ["example.test/app:1", "example.test/bee:1", "sha256:" + "b" * 64]
    assert ls.LsQuery().names_only_will_do and not ls.LsQuery(drift=True).names_only_will_do


def test_ls_exits_1_when_a_term_names_nothing_on_the_node() -> None:
    node = node_of(store_with_images())
    assert ls.ls(node, Policy(), ls.LsQuery(("example.test/app:1",))).exit_code == EXIT_OK
    # Left out by --pinned, but on the node: no miss.
    assert ls.ls(node, Policy(), ls.LsQuery(("example.test/bee:1",), pinned=True)).exit_code == EXIT_OK
    for term in ("example.test/none:1", "none.example/*", "abcd1234"):
        missing = ls.ls(node, Policy(), ls.LsQuery(("example.test/app:1", term)))
        assert [row.ref for row in missing.rows] == ["example.test/app:1"] and missing.exit_code == EXIT_ERROR, term


def test_change_reports_every_item_and_its_exit_code() -> None:
    store = store_with_images()
    store.fail_names.add("example.test/bee:1")
    report = pin.change(node_of(store), "pin", ["example.test/app:1", "example.test/bee:1"], "pinctl", False)
    assert {r.ref: r.action for r in report.results} == {
        "example.test/app:1": "already-pinned", "example.test/bee:1": "failed"}
    assert (report.status, report.exit_code) == ("partial", EXIT_PARTIAL)
    only_failures = pin.change(node_of(store), "pin", ["example.test/bee:1"], "pinctl", False)
    assert only_failures.exit_code == EXIT_ERROR


def test_sync_refuses_an_empty_policy_prune_unless_told() -> None:
    store = store_with_images()
    with pytest.raises(UsageError, match="--allow-empty-policy"):
        sync.sync(node_of(store), Policy(), sync.SyncRequest(prune=True, files=["x.toml"]))
    report = sync.sync(node_of(store), Policy(), sync.SyncRequest(prune=True, dry_run=True, allow_empty_policy=True))
    assert report.exit_code == EXIT_OK


def test_sync_labels_what_the_policy_covers() -> None:
    store = store_with_images()
    report = sync.sync(node_of(store), policy_of("example.test/bee:*"), sync.SyncRequest())
    assert [(r.ref, r.action) for r in report.results] == [("example.test/bee:1", "pinned")]
    assert store.writes == [("k8s.io", "example.test/bee:1", "pinned")]


class FakeRuntime:
    """A CRI runtime whose answer changes after a number of asks, as one catching up does."""

    endpoint = "unix:///fake/cri.sock"

    def __init__(self, pinned_after: int) -> None:
        self.asked = 0
        self.pinned_after = pinned_after
        self.prefetched: list[tuple[str, ...]] = []
        self.events: list[str] = []  # what check did, in order (with the store's, see below)

    def prefetch(self, *listings: str) -> None:
        self.prefetched.append(listings)

    def list_images(self) -> list[CriImage]:
        self.asked += 1
        self.events.append("cri listed")
        return [CriImage(digest("a"), ("example.test/app:1",), (), 1, self.asked > self.pinned_after)]

    def image_status(self, ref: str) -> Optional[CriImage]:
        return None


class FakeClock:
    def __init__(self) -> None:
        self.time = 0.0

    def now(self) -> float:
        return self.time

    def sleep(self, seconds: float) -> None:
        self.time += seconds


def test_check_waits_until_the_runtime_catches_up() -> None:
    store = OrderedStore()
    runtime = FakeRuntime(pinned_after=2)
    store.events = runtime.events
    heard: list[float] = []
    asked_before_open: list[str] = []

    def open_runtime() -> tuple[FakeRuntime, RuntimeVersion]:
        asked_before_open.extend(store.prefetched)
        return runtime, RUNTIME

    report = check.check(node_of(store), Policy(), open_runtime, check.CheckRequest(wait=10),
                            lambda _r, left: heard.append(left), FakeClock())
    assert report.exit_code == EXIT_OK and runtime.asked == 3
    assert report.waited == 2.0 and heard == [10.0, 9.0]
    # The node's records are asked for before the CRI is opened; in each poll the CRI's whole list
    # is taken while containerd still encodes them, and they are read after.
    assert asked_before_open == store.namespaces()
    assert runtime.events == ["records asked", "cri listed", "records read"] * 3


def test_check_through_cri_dockerd_reads_the_records_while_dockers_list_comes() -> None:
    """Through cri-dockerd the CRI's list is Docker's own, slow: it is asked for first and taken
    after the node's records are read, not waited for before them."""
    store = OrderedStore()
    runtime = FakeRuntime(pinned_after=0)
    store.events = runtime.events
    docker = RuntimeVersion("docker", "28.0.1", "v1")
    check.check(node_of(store), Policy(), lambda: (runtime, docker), check.CheckRequest(), lambda *_: None, FakeClock())
    assert runtime.prefetched == [("images",)]
    assert runtime.events == ["records asked", "records read", "cri listed"]


class OrderedStore(FakeStore):
    """store_with_images' records, saying when they are asked for and when read."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []
        for name, seed, labels in (("example.test/app:1", "a", PIN), ("example.test/bee:1", "b", None),
                                   ("sha256:" + "b" * 64, "b", None)):
            self.add("k8s.io", name, seed, labels)

    def prefetch_images(self, namespace: str) -> None:
        super().prefetch_images(namespace)
        self.events.append("records asked")

    def list_images(self, namespace: str) -> list[StoredImage]:
        self.events.append("records read")
        return super().list_images(namespace)


def test_check_without_wait_reports_at_once() -> None:
    runtime = FakeRuntime(5)
    report = check.check(node_of(store_with_images()), Policy(), lambda: (runtime, RUNTIME), check.CheckRequest(),
                            lambda *_: None, FakeClock())
    assert report.exit_code == EXIT_ERROR and report.waited is None


def config_of(tmp_path: Path, containerd_toml: str = "version = 3\n") -> Config:
    """Settings naming the fake store's containerd and a containerd config file of its own."""
    path = tmp_path / "containerd.toml"
    path.write_text(containerd_toml)
    return Config(Settings(containerd_address=FakeStore.address, containerd_config=str(path)), {}, [], [])


def test_export_expands_over_names_not_ids(tmp_path: Path) -> None:
    store = store_with_images()
    store.runtime_version = "2.1.9"
    result = config.export("containerd", policy_of("example.test/*"), node_of(store), config_of(tmp_path))
    assert "example.test/bee:1" in result.text and "sha256:" not in result.text


def test_export_for_containerd_asks_the_daemon_and_reads_the_configured_file(tmp_path: Path) -> None:
    store = store_with_images()
    store.runtime_version = "2.1.9"
    cfg = config_of(tmp_path, "version = 2\n")
    result = config.export("containerd", policy_of("example.test/app:1"), node_of(store), cfg)
    assert "containerd 2.1.9 CRI config (version 2)" in result.text
    assert f"Merge the table into {cfg.settings.containerd_config}, which is version 2" in " ".join(
        line.lstrip("# ") for line in result.text.splitlines())
    assert result.notes == []
    store.runtime_version = "1.7.24"
    with pytest.raises(UsageError, match="containerd 1.7.24 at /fake.sock has no pinned_images") as refused:
        config.export("containerd", policy_of("example.test/app:1"), node_of(store), cfg)
    assert "pinctl sync" in refused.value.hint


def test_lint_report_exit_code() -> None:
    assert config.lint([PatternEntry("example.test/app:1", "test", "pinctl")], None).exit_code == EXIT_OK
    bad = config.lint([PatternEntry("*", "test", "pinctl")], None)
    assert bad.exit_code == EXIT_ERROR and bad.problems[0].kind == "invalid"


def test_namespaces_marks_the_defaults_and_the_node_closes_its_stores() -> None:
    store = store_with_images()
    store.add("other", "example.test/x:1", "x")
    node = node_of(store)
    assert ls.namespaces(node) == [("k8s.io", True), ("other", False)]
    node.close()
    assert store.closed == 1


# -- what unpin cannot undo --------------------------------------------------------------------


def test_unpin_warns_that_a_pattern_pins_the_image_again() -> None:
    store = store_with_images()
    report = pin.change(node_of(store), "unpin", ["example.test/app:1"], "pinctl", False,
                             policy_of("*app*"))
    assert [r.action for r in report.results] == ["unpinned"]
    assert report.warnings == ["example.test/app:1: pattern *app* (test) pins it again at the next sync"]
    assert all(len(line) <= 100 for line in report.warnings)


def sandbox_store(version: str, pins: tuple[ConfigPin, ...] = ()) -> FakeStore:
    store = FakeStore(sandbox="example.test/pause:3.9", pins=pins)
    store.runtime_version = version
    store.add("k8s.io", "example.test/pause:3.9", "p", PIN)
    store.add("k8s.io", "sha256:" + "p" * 64, "p", PIN)
    return store


def unpin_sandbox(store: FakeStore, dry_run: bool) -> pin.ChangeReport:
    return pin.change(node_of(store), "unpin", ["example.test/pause:3.9"], "pinctl", dry_run, Policy())


@pytest.mark.parametrize("dry_run", [True, False])
def test_unpin_of_containerd_1x_sandbox_image_says_the_gc_may_delete_it(dry_run: bool) -> None:
    report = unpin_sandbox(sandbox_store("1.7.24"), dry_run)
    warnings = {r.ref: r.warning for r in report.results}
    # Said on the record the config names (the sandbox_image), once; nothing claims it is kept.
    assert warnings == {"example.test/pause:3.9": (
        "it is the CRI sandbox image and containerd 1.7.24 labels it only when its CRI pulls it or first takes "
        "in a record of its name: the kubelet's GC may delete it now (pinctl pin example.test/pause:3.9 keeps it)"),
        "sha256:" + "p" * 64: None}
    assert report.warnings == []
    # Before 1.7.14 its CRI labelled it on its own pulls only.
    [older] = [r.warning for r in unpin_sandbox(sandbox_store("1.7.12"), dry_run).results if r.warning]
    assert "only when its CRI pulls it:" in older


def test_unpin_of_containerd_2x_sandbox_image_says_containerd_pins_it_again() -> None:
    entry = ConfigPin("sandbox", "example.test/pause:3.9", "/etc/containerd/config.toml")
    report = unpin_sandbox(sandbox_store("2.1.9", (entry,)), True)
    [warning] = [r.warning for r in report.results if r.warning]
    assert warning.startswith("containerd will pin it again") and "pinned_images.sandbox in" in warning
    assert report.warnings == []
    # A short entry names no record (compared as written): 2.x never labels the image its CRI uses
    # for sandboxes (docker.io/library/pause:3.9), so the GC may delete it.
    store = FakeStore(sandbox="pause:3.9", pins=[ConfigPin("sandbox", "pause:3.9", "/etc/containerd/config.toml")])
    store.runtime_version = "2.1.9"
    store.add("k8s.io", "docker.io/library/pause:3.9", "p", PIN)
    report = pin.change(node_of(store), "unpin", ["docker.io/library/pause:3.9"], "pinctl", True, Policy())
    [warning] = [r.warning for r in report.results if r.warning]
    assert "labels only the record named exactly as pinned_images.sandbox has it (pause:3.9)" in warning


def test_config_pins_come_from_the_store_without_listing_its_records() -> None:
    """check reads containerd's pinned_images entries beside the rows it has listed: reaching
    them must not list every record of k8s.io a second time (0.2 s at 10,000 images)."""
    entry = ConfigPin("sandbox", "example.test/pause:3.9", "/etc/containerd/config.toml")
    store = OrderedStore()
    store.pins = [entry]
    assert node_of(store, "default", "k8s.io").config_pins() == [entry]
    assert "records read" not in store.events
    assert node_of(store, "default").config_pins() == []  # no CRI namespace read: none


def test_unpin_of_the_sandbox_image_on_a_cri_ignoring_pins_adds_nothing() -> None:
    report = unpin_sandbox(sandbox_store("1.6.20"), True)
    assert [r.warning for r in report.results] == [None, None] and report.warnings == []


def test_unpin_says_nothing_when_nothing_keeps_the_image() -> None:
    store = store_with_images()
    assert pin.change(node_of(store), "unpin", ["example.test/app:1"], "pinctl", False,
                           policy_of("*bee*")).warnings == []
    # pin never warns, and neither does an unpin that found no image.
    assert pin.change(node_of(store), "pin", ["example.test/app:1"], "pinctl", False,
                           policy_of("*app*")).warnings == []
    assert pin.change(node_of(store), "unpin", ["example.test/none:1"], "pinctl", False,
                           policy_of("*none*")).warnings == []


def test_a_short_hex_argument_hints_at_the_id_prefix_rule() -> None:
    store = store_with_images()
    [result] = pin.change(node_of(store), "pin", ["e14"], "pinctl", False).results
    assert result.action == "failed" and result.error is not None
    assert "no image e14 (docker.io/library/e14:latest)" in result.error
    assert "for an image ID, give 4 or more hex digits" in result.error and len(result.error) <= 100
    [named] = pin.change(node_of(store), "pin", ["example.test/nothing:1"], "pinctl", False).results
    assert "ID prefix" not in (named.error or "")


class SizedStoreFailing(FakeStore):
    """A store whose CRI says sizes, and whose own listing then fails (containerd went away)."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes_asked = self.sizes_open = 0

    @contextlib.contextmanager
    def cri_image_sizes(self) -> Iterator[Callable[[], Optional[dict[str, int]]]]:
        self.sizes_asked += 1
        self.sizes_open += 1
        try:
            yield lambda: {}
        finally:
            self.sizes_open -= 1

    def list_images(self, namespace: str) -> list[StoredImage]:
        raise EngineError("containerd at /fake.sock did not answer within 2s")


def test_the_cri_s_sizes_are_released_when_the_namespace_s_listing_fails() -> None:
    store = SizedStoreFailing()
    store.add("k8s.io", "example.test/app:1", "a")
    with pytest.raises(EngineError):
        listing.list_namespace(store, "k8s.io", None)
    # Asked before the records were listed, and its channel closed: a service asks again and again.
    assert store.sizes_asked == 1 and store.sizes_open == 0

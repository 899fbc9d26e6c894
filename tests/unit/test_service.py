from __future__ import annotations

import pytest

from pinctl.errors import UnknownNamespace, UsageError
from pinctl.model import (
    ACTION_CHANGED_UNDER_US,
    MANAGED_LABEL,
    PIN_LABEL,
    Action,
    ConfigPin,
    Descriptor,
    ImageRow,
    StoredImage,
)
from pinctl.node import sources
from pinctl.pins import listing
from pinctl.pins import plans as pinning
from pinctl.pins.policy import Policy
from pinctl.render import cells

from .fakes import MANIFEST, FakeStore, digest

PIN = {PIN_LABEL: "pinned"}


def rows_by_ref(store: FakeStore, ns: str = "k8s.io") -> dict[str, ImageRow]:
    return {row.ref: row for row in listing.list_images(store, [ns]).rows}


def test_one_labelled_ref_pins_every_ref_of_the_image() -> None:
    store = FakeStore()
    store.add("k8s.io", "example.test/app:1", "a", PIN)
    store.add("k8s.io", "example.test/app:latest", "a")
    store.add("k8s.io", "example.test/other:1", "b")
    rows = rows_by_ref(store)
    assert rows["example.test/app:latest"].pinned
    assert [r.as_dict() for r in rows["example.test/app:latest"].reasons] == [
        {"kind": "label", "detail": "example.test/app:1"}
    ]
    assert not rows["example.test/other:1"].pinned


def test_ineffective_label_does_not_pin_and_says_why() -> None:
    store = FakeStore()
    store.add("k8s.io", "example.test/app:1", "a", {PIN_LABEL: "true"})
    row = rows_by_ref(store)["example.test/app:1"]
    assert not row.pinned
    assert row.reasons[0].kind == "ineffective-label"


def test_sandbox_counts_only_in_the_cri_namespace() -> None:
    store = FakeStore(sandbox="example.test/pause:3.9")
    store.add("k8s.io", "example.test/pause:3.9", "p", PIN)
    store.add("moby", "example.test/pause:3.9", "p", PIN)
    assert [r.kind for r in rows_by_ref(store, "k8s.io")["example.test/pause:3.9"].reasons] == ["label", "sandbox"]
    assert [r.kind for r in rows_by_ref(store, "moby")["example.test/pause:3.9"].reasons] == ["label"]


@pytest.mark.parametrize(("version", "rule"), [
    ("1.7.24", "containerd 1.7.24 labels it only when its CRI pulls it or first takes in a record of its name"),
    ("1.6.29", "containerd 1.6.29 labels it only when its CRI pulls it or first takes in a record of its name"),
    ("1.7.13", "containerd 1.7.13 labels it only when its CRI pulls it"),
    ("1.6.28", "containerd 1.6.28 labels it only when its CRI pulls it"),
])
def test_containerd_1x_pins_its_sandbox_image_only_while_labelled(version: str, rule: str) -> None:
    """containerd's CRI reads the label alone: its sandbox image without one is not pinned, and
    that release will not label it again (pins/sandbox.py)."""
    store = FakeStore(sandbox="example.test/pause:3.9")
    store.runtime_version = version
    store.add("k8s.io", "example.test/pause:3.9", "p")
    store.add("k8s.io", "sha256:" + "p" * 64, "p")
    for row in rows_by_ref(store).values():
        assert not row.pinned and row.drift is None
        assert [r.as_dict() for r in row.reasons] == [{"kind": "sandbox", "detail": "example.test/pause:3.9"},
                                                     {"kind": "unlabelled-sandbox", "detail": rule}]
        assert cells.why(row) == "sandbox; no label, and containerd puts none back"
    store.add("k8s.io", "example.test/pause:3.9", "p", PIN)
    assert all(row.pinned and [r.kind for r in row.reasons] == ["label", "sandbox"]
               for row in rows_by_ref(store).values())


def test_containerd_2x_sandbox_entry_spelt_otherwise_is_never_labelled() -> None:
    entry = ConfigPin("sandbox", "pause:3.9", "/etc/containerd/config.toml")
    store = FakeStore(sandbox="pause:3.9", pins=[entry])
    store.runtime_version = "2.1.9"
    store.add("k8s.io", "docker.io/library/pause:3.9", "p")
    row = rows_by_ref(store)["docker.io/library/pause:3.9"]
    assert not row.pinned and [r.kind for r in row.reasons] == ["sandbox", "unlabelled-sandbox"]
    assert "pinned_images.sandbox has it (pause:3.9)" in row.reasons[1].detail
    # Spelt as the record is, containerd relabels it at once: nothing more to say while it catches up.
    store = FakeStore(sandbox="docker.io/library/pause:3.9", pins=[ConfigPin("sandbox", "docker.io/library/pause:3.9", "f")])
    store.runtime_version = "2.1.9"
    store.add("k8s.io", "docker.io/library/pause:3.9", "p")
    assert [r.kind for r in rows_by_ref(store)["docker.io/library/pause:3.9"].reasons] == ["sandbox"]


def test_sandbox_on_a_cri_ignoring_pins_is_not_pinned_and_says_so() -> None:
    store = FakeStore(sandbox="example.test/pause:3.9")
    store.runtime_version = "1.6.20"
    store.add("k8s.io", "example.test/pause:3.9", "p")
    row = rows_by_ref(store)["example.test/pause:3.9"]
    assert not row.pinned and [r.kind for r in row.reasons] == ["sandbox", "ignored"]


def test_default_namespaces_are_the_present_ones() -> None:
    store = FakeStore()
    store.add("moby", "example.test/a:1", "a")
    store.add("default", "example.test/a:1", "a")
    assert sources.select_namespaces(store, []) == ["moby"]
    assert sources.select_namespaces(store, ["all"]) == ["default", "moby"]
    with pytest.raises(UnknownNamespace):
        sources.select_namespaces(store, ["nope"])


def test_long_running_commands_read_an_absent_namespace_as_empty() -> None:
    """sync --watch and cri-proxy (absent_ok): a -n or default namespace that does not exist yet
    is read, and said to be absent; a one-shot command still refuses a -n that does not exist."""
    store = FakeStore()
    assert sources._selected(store, ["k8s.io"], absent_ok=True) == (["k8s.io"], ["k8s.io"])
    assert sources._selected(store, [], absent_ok=True) == (["k8s.io", "moby"], ["k8s.io", "moby"])
    store.add("moby", "example.test/a:1", "a")
    assert sources._selected(store, [], absent_ok=True) == (["k8s.io", "moby"], ["k8s.io"])
    assert sources._selected(store, ["all"], absent_ok=True) == (["moby"], [])
    assert sources._selected(store, [], absent_ok=False) == (["moby"], [])
    with pytest.raises(UnknownNamespace):
        sources._selected(store, ["k8s.io"], absent_ok=False)
    source = sources.ContainerdSource(store, ["k8s.io", "moby"], [], absent=["k8s.io"])
    node = sources.Node([source])
    assert node.absent_namespaces() == ["k8s.io"] and [view.namespace for view in node.views()] == ["k8s.io", "moby"]
    followed = source.follow()
    assert store.list_images("k8s.io") == [] and followed is not None and followed.watches("k8s.io")


def test_filter_by_glob_id_prefix_and_pinned() -> None:
    store = FakeStore()
    store.add("k8s.io", "example.test/app:1", "a", PIN)
    store.add("k8s.io", "example.test/bee:1", "b")
    rows = listing.list_images(store, ["k8s.io"]).rows
    assert [r.ref for r in listing.filter_rows(rows, ["example.test/b*"], None)] == ["example.test/bee:1"]
    assert [r.ref for r in listing.filter_rows(rows, ["bbbbbb"], None)] == ["example.test/bee:1"]
    assert [r.ref for r in listing.filter_rows(rows, [], True)] == ["example.test/app:1"]


def make_store() -> FakeStore:
    store = FakeStore()
    store.add("k8s.io", "example.test/app:1", "a")
    store.add("k8s.io", "example.test/app:2", "a", PIN)
    store.add("k8s.io", "example.test/bee:1", "b")
    store.add("k8s.io", "example.test/bad:1", "c")
    return store


def run(store: FakeStore, command: str, args: list[str], dry_run: bool = False) -> dict[str, str]:
    plan = pinning.make_plan([pinning.NamespaceView(store, "k8s.io")], command, args)
    return {r.ref: r.action for r in pinning.apply_plan(plan, dry_run)}


def test_pin_reports_changed_skipped_and_failed_and_goes_on() -> None:
    store = make_store()
    store.fail_names.add("example.test/bad:1")
    actions = run(store, "pin", ["example.test/app:1", "example.test/app:2", "example.test/bad:1", "example.test/gone:1"])
    assert actions == {
        "example.test/app:1": "pinned",
        "example.test/app:2": "already-pinned",
        "example.test/bad:1": "failed",
        "example.test/gone:1": "failed",
    }
    assert store.writes == [("k8s.io", "example.test/app:1", "pinned")]


def test_unpin_clears_every_ref_of_the_image() -> None:
    store = make_store()
    store.add("k8s.io", "example.test/app:1", "a", PIN)
    actions = run(store, "unpin", ["example.test/app:1"])
    assert actions == {"example.test/app:1": "unpinned", "example.test/app:2": "unpinned"}
    assert not any(PIN_LABEL in r.labels for r in store.list_images("k8s.io"))


def test_id_selects_every_ref_and_ambiguity_fails_the_item() -> None:
    store = make_store()
    assert run(store, "pin", ["aaaaaaaa"]) == {"example.test/app:1": "pinned", "example.test/app:2": "already-pinned"}
    store.add("k8s.io", "example.test/abc:1", "aaaab")
    plan = pinning.make_plan([pinning.NamespaceView(store, "k8s.io")], "pin", ["sha256:aaaa"])
    [failure] = plan.settled
    assert failure.action == "failed" and "matches 2 images" in (failure.error or "")
    assert (failure.error or "").count("by its ID") == 2


def test_ambiguity_names_the_manifest_digest_that_matched() -> None:
    store = make_store()
    store.add("k8s.io", "example.test/beef:1", "beef")
    manifest = Descriptor(MANIFEST, "sha256:" + "beefcafe" * 8, 500)
    store.ids[manifest.digest] = digest("d")
    store.records["k8s.io"]["example.test/other:1"] = StoredImage("example.test/other:1", {}, manifest)
    plan = pinning.make_plan([pinning.NamespaceView(store, "k8s.io")], "pin", ["beef"])
    [failure] = plan.settled
    assert "image beefbeefbeef by its ID" in (failure.error or "")
    assert "image dddddddddddd by the manifest digest sha256:beefcafebeef of example.test/other:1" in (failure.error or "")


def test_hand_pin_takes_ownership_from_sync_so_prune_keeps_it() -> None:
    store = make_store()
    store.add("k8s.io", "example.test/bee:1", "b", {PIN_LABEL: "pinned", MANAGED_LABEL: "true"})
    assert run(store, "pin", ["example.test/bee:1"]) == {"example.test/bee:1": "adopted"}
    assert store.list_images("k8s.io")[2].labels == {PIN_LABEL: "pinned"}
    plan = pinning.make_sync_plan([pinning.NamespaceView(store, "k8s.io")], Policy([]), prune=True)
    assert plan.changes == []


def test_a_record_changed_after_planning_is_left_alone_and_reported() -> None:
    store = make_store()
    plan = pinning.make_plan([pinning.NamespaceView(store, "k8s.io")], "pin", ["example.test/app:1", "example.test/bee:1"])
    store.add("k8s.io", "example.test/app:1", "c")  # re-pointed at another image after planning
    results = {r.ref: r for r in pinning.apply_plan(plan, dry_run=False)}
    assert results["example.test/app:1"].action == ACTION_CHANGED_UNDER_US
    assert "re-pointed from" in (results["example.test/app:1"].error or "")
    assert results["example.test/bee:1"].action == "pinned"
    assert store.writes == [("k8s.io", "example.test/bee:1", "pinned")]
    assert pinning.status_of(list(results.values())) == "partial"


def test_dry_run_writes_nothing() -> None:
    store = make_store()
    assert run(store, "pin", ["example.test/bee:1"], dry_run=True) == {"example.test/bee:1": "pinned"}
    assert store.writes == []


def test_malformed_argument_stops_before_any_change() -> None:
    store = make_store()
    with pytest.raises(UsageError):
        pinning.make_plan([pinning.NamespaceView(store, "k8s.io")], "pin", ["example.test/bee:1", "Bad Ref"])
    assert store.writes == []


@pytest.mark.parametrize(
    "actions, status",
    [
        (["pinned"], "success"),
        (["pinned", "already-pinned"], "success"),
        (["pinned", "failed"], "partial"),
        (["failed"], "error"),
        ([ACTION_CHANGED_UNDER_US], "partial"),
        ([ACTION_CHANGED_UNDER_US, "failed"], "partial"),
    ],
)
def test_status(actions: list[Action], status: str) -> None:
    from pinctl.model import ItemResult

    assert pinning.status_of([ItemResult("k8s.io", str(i), a) for i, a in enumerate(actions)]) == status


def test_an_old_containerd_pins_nothing_and_says_why() -> None:
    store = FakeStore(sandbox="example.test/pause:3.9")
    store.runtime_version = "1.6.20~ds1"
    store.add("k8s.io", "example.test/app:1", "a", PIN)
    store.add("k8s.io", "example.test/pause:3.9", "p")
    store.add("moby", "example.test/app:1", "a", PIN)
    rows = {(r.namespace, r.ref): r for r in listing.list_images(store, ["k8s.io", "moby"]).rows}
    for key in (("k8s.io", "example.test/app:1"), ("k8s.io", "example.test/pause:3.9")):
        assert not rows[key].pinned
        assert "1.6.20~ds1" in rows[key].reasons[-1].detail and rows[key].reasons[-1].kind == "ignored"
    assert rows[("moby", "example.test/app:1")].pinned


def test_drift_ignores_the_sandbox_image() -> None:
    from pinctl.config.loader import PatternEntry
    from pinctl.pins.policy import compile_policy

    store = FakeStore(sandbox="example.test/pause:3.9")
    store.add("k8s.io", "example.test/pause:3.9", "p", PIN)
    store.add("k8s.io", "example.test/hand:1", "h", PIN)
    store.add("k8s.io", "example.test/app:1", "a")
    policy = compile_policy([PatternEntry("example.test/app:*", "test", "pinctl")])
    drift = {r.ref: r.drift for r in listing.list_images(store, ["k8s.io"], policy).rows}
    assert drift == {"example.test/pause:3.9": None, "example.test/hand:1": "uncovered", "example.test/app:1": "unlabelled"}


@pytest.mark.parametrize(
    "text, could",
    [
        ("sha256:" + "a" * 64, True), ("sha256:ab*", True), ("sha*", True), ("*256:ab*", True), ("*abc1*", True),
        ("*:*", True), ("registry.example/*", False), ("*beta*", False), ("example.test/app:1", False),
        ("*sha256:xyz*", False), ("sha256:abz*", False), ("*6:f*", True),
    ],
)
def test_which_patterns_could_match_an_image_id(text: str, could: bool) -> None:
    from pinctl.pins.patterns import parse_pattern
    from pinctl.pins.policy import could_match_an_id

    assert could_match_an_id(parse_pattern(text)) is could


def test_could_match_an_id_never_says_no_wrongly() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from pinctl.errors import PatternError
    from pinctl.pins.patterns import matches, parse_pattern
    from pinctl.pins.policy import could_match_an_id

    ids = st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda h: "sha256:" + h)

    @settings(max_examples=300, deadline=None)
    @given(ids, st.integers(0, 70), st.integers(1, 12), st.sampled_from(["exact", "glob", "keyword"]))
    def check(image_id: str, start: int, length: int, kind: str) -> None:
        piece = image_id[start : start + length]
        text = {"exact": image_id, "glob": image_id[:start] + "*", "keyword": f"*{piece}*"}[kind]
        try:
            pattern = parse_pattern(text)
        except PatternError:
            return
        if matches(pattern, image_id):
            assert could_match_an_id(pattern), text

    check()

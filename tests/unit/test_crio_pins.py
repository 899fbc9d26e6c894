"""CRI-O's pins as pinctl works them out (pins/crio.py): names only, the pause image, pinctl's own items."""

from __future__ import annotations

from typing import Sequence

from pinctl.backends.cri import CriImage
from pinctl.config.crio import CrioConfig, CrioEntry
from pinctl.model import REASON_CRIO_CONFIG, REASON_CRIO_PIN, REASON_SANDBOX
from pinctl.pins import crio as crio_pins
from pinctl.pins.listing import annotate_policy
from pinctl.pins.policy import compile_policy
from pinctl.config.loader import PatternEntry

ID_A = "a" * 60 + "0db0"
ID_B = "b" * 64
PAUSE = "example.test/pause:3.10"


def image(image_id: str, tags: Sequence[str], digests: Sequence[str] = (), pinned: bool = False) -> CriImage:
    return CriImage(image_id, tuple(tags), tuple(digests), 1000, pinned)


def config(*items: tuple[str, str], pause: str = PAUSE) -> CrioConfig:
    entries = tuple(CrioEntry(text, "/etc/crio/crio.conf.d/10-site.conf" if owner == "site"
                              else "/etc/crio/crio.conf.d/zz-pinctl.conf", n + 1, owner)  # type: ignore[arg-type]
                    for n, (text, owner) in enumerate(items))
    site = tuple(entry for entry in entries if entry.owner == "site")
    own = tuple(entry for entry in entries if entry.owner != "site")
    return CrioConfig(main_path="/etc/crio/crio.conf", dropin_dir="/etc/crio/crio.conf.d", files=(),
                      pinned_images=entries, pinned_from=None, pause_image=pause, pause_where="CRI-O's default",
                      site_entries=site, own_entries=own, overriding=(), warnings=())


def test_names_only_never_the_id() -> None:
    # The ID holds "db": a keyword CRI-O matches against names does not pin it.
    rows = crio_pins.rows_for([image(ID_A, ["example.test/app:1"])], config(("*db*", "site")))
    assert [row.pinned for row in rows] == [False]


def test_every_name_counts_not_only_the_first() -> None:
    img = image(ID_B, ["example.test/app:1", "example.test/other:2"], ["example.test/app@sha256:" + "c" * 64])
    rows = crio_pins.rows_for([img], config(("example.test/other:2", "site")))
    assert {row.ref for row in rows} == {"example.test/app:1", "example.test/other:2"}
    assert all(row.pinned for row in rows)
    assert rows[0].digest == "sha256:" + "c" * 64
    assert rows[0].reasons[0].kind == REASON_CRIO_CONFIG
    assert rows[0].reasons[0].source == "/etc/crio/crio.conf.d/10-site.conf:1"


def test_globs_are_unanchored_as_in_crio() -> None:
    img = image(ID_B, ["mirror.example.test/team/app:1"])
    assert crio_pins.rows_for([img], config(("example.test/team/*", "site")))[0].pinned


def test_pause_image_is_pinned_as_the_sandbox() -> None:
    rows = crio_pins.rows_for([image(ID_B, [PAUSE.upper()])], config())
    assert rows[0].pinned
    assert [r.kind for r in rows[0].reasons] == [REASON_SANDBOX]


def test_empty_and_blank_items_pin_nothing() -> None:
    rows = crio_pins.rows_for([image(ID_B, ["example.test/app:1"])], config(("", "site"), ("  ", "site")))
    assert not rows[0].pinned


def test_pinctl_items_are_its_pins_and_drift_without_a_pattern() -> None:
    rows = crio_pins.rows_for([image(ID_B, ["example.test/app:1"])], config(("example.test/app:1", "pin")))
    assert rows[0].reasons[0].kind == REASON_CRIO_PIN
    annotate_policy(rows, compile_policy([]))
    assert rows[0].drift == "uncovered"


def test_site_items_are_not_drift() -> None:
    rows = crio_pins.rows_for([image(ID_B, ["example.test/app:1"])], config(("example.test/app:1", "site")))
    annotate_policy(rows, compile_policy([]))
    assert rows[0].drift is None


def test_digest_names_the_cri_makes_up_are_not_names() -> None:
    # CRI-O lists repo@digest for each tagged repository though it holds only the tag; a digest
    # name of a repository with no tag came from a pull by digest, and CRI-O matches it.
    made_up = "example.test/app@sha256:" + "c" * 64
    pulled = "example.test/digested@sha256:" + "d" * 64
    img = image(ID_B, ["example.test/app:1"], [made_up, pulled])
    assert crio_pins.names_of(img) == ["example.test/app:1", pulled]
    assert not crio_pins.rows_for([img], config(("*@sha256:c*", "site")))[0].pinned
    assert crio_pins.rows_for([img], config(("*@sha256:d*", "site")))[0].pinned


def test_a_registry_port_is_not_a_tag() -> None:
    img = image(ID_B, ["127.0.0.1:5000/app:1"], ["127.0.0.1:5000/app@sha256:" + "c" * 64])
    assert crio_pins.names_of(img) == ["127.0.0.1:5000/app:1"]


def test_an_image_without_names_is_shown_by_its_id() -> None:
    rows = crio_pins.rows_for([image(ID_B, [])], config())
    assert [row.ref for row in rows] == [ID_B]


def test_own_entries_add_and_remove_by_owner() -> None:
    own = crio_pins.OwnEntries([("example.test/a:1", "sync")])
    assert own.add("example.test/b:1", "pin")
    assert not own.add("EXAMPLE.test/b:1", "pin")
    assert own.remove(["example.test/a:1"], "pin") == []
    assert own.remove(["example.test/B:1"], "pin") == ["example.test/b:1"]
    own.replace("sync", ["example.test/c:*"])
    assert own.items == [("example.test/c:*", "sync")]


def test_policy_in_crio_dialect_and_ids_as_names() -> None:
    digest = "example.test/app@sha256:" + "c" * 64
    images = [image(ID_B, ["example.test/app:1"], [digest])]
    policy = compile_policy([PatternEntry("Example.test/App:1", "f:1", "pinctl"),
                             PatternEntry("*keep*", "f:2", "pinctl"),
                             PatternEntry(f"sha256:{ID_B}", "f:3", "pinctl"),
                             PatternEntry(f"sha256:{ID_A}", "f:4", "pinctl"),
                             PatternEntry("example.test/team/*", "f:5", "pinctl")])
    out = crio_pins.policy_items(policy, images)
    # The ID becomes the tag: the digest name the CRI lists for it is one CRI-O does not hold.
    assert out.items == ["example.test/app:1", "*keep*", "example.test/team/*"]
    by_digest = [image(ID_B, [], [digest])]
    assert crio_pins.policy_items(compile_policy([PatternEntry(f"sha256:{ID_B}", "f:3", "pinctl")]),
                                  by_digest).items == [digest]
    assert len(out.refused) == 1 and "f:4" in out.refused[0]


def test_a_glob_wider_in_crio_is_said() -> None:
    images = [image(ID_B, ["mirror.example.test/team/app:1"])]
    out = crio_pins.policy_items(compile_policy([PatternEntry("example.test/team/*", "f:1", "pinctl")]), images)
    assert out.notes and "mirror.example.test/team/app:1" in out.notes[0]


def test_an_id_prefix_of_two_images_names_neither() -> None:
    import pytest

    from pinctl.errors import AmbiguousRef
    from pinctl.node.crio import _wanted

    rows = crio_pins.rows_for([image("abcdef" + "1" * 58, ["example.test/a:1"]),
                               image("abcdef" + "2" * 58, ["example.test/b:V2"])], config())
    with pytest.raises(AmbiguousRef):
        _wanted(rows, "abcdef", "pinctl")
    assert [img.names for img in _wanted(rows, "abcdef1", "pinctl")] == [["example.test/a:1"]]
    assert [img.names for img in _wanted(rows, "b:V2", "pinctl")] == []  # a short name is not CRI-O's name
    assert [img.names for img in _wanted(rows, "example.test/b:v2", "pinctl")] == [["example.test/b:V2"]]

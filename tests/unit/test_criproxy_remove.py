"""cri-proxy's RemoveImage decision (criproxy/remove.py) over fake pins and a fake ImageStatus:
which pins refuse, what the one line says, what is forwarded, what is journaled. The real
runtimes and crictl: tests/integration/test_criproxy_remove.py."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional

import pytest

from pinctl.criproxy import remove
from pinctl.criproxy.relay import Relay
from pinctl.journal import REQUEST_FAILED, REQUEST_FORWARDED, REQUEST_REFUSED, RemoveRequest
from pinctl.journal.store import Journal
from pinctl.model import (
    REASON_CONTAINERD_CONFIG,
    REASON_CRIO_PIN,
    REASON_INEFFECTIVE_LABEL,
    REASON_LABEL,
    REASON_PATTERN,
    Descriptor,
    ImageRow,
    Reason,
)
from pinctl.proto import cri_pb2

ID_A, ID_B, ID_C = (f"sha256:{c * 64}" for c in "abc")


def row(ref: str, image_id: Optional[str], *reasons: Reason, namespace: str = "k8s.io") -> ImageRow:
    return ImageRow(namespace, ref, image_id, Descriptor("m", f"sha256:m-{ref}", 1), 1, {}, reasons=list(reasons))


class FakePins:
    def __init__(self, rows: list[ImageRow], runtime: str = "containerd") -> None:
        self.rows, self.runtime, self.reads = rows, runtime, 0
        self.fail = False

    def rows_now(self) -> Optional[tuple[list[ImageRow], str]]:
        self.reads += 1
        return None if self.fail else (self.rows, self.runtime)


class Logged:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __call__(self, level: str, message: str, **fields: object) -> None:
        self.lines.append((level, message))


def request(ref: str) -> bytes:
    return cri_pb2.RemoveImageRequest(image=cri_pb2.ImageSpec(image=ref)).SerializeToString()


IMAGES = {  # what the runtime's ImageStatus names, by what the request says
    "example.test/a:1": (ID_A, ["example.test/a:1"], False),
    ID_A: (ID_A, ["example.test/a:1"], False),
    "example.test/b:1": (ID_B, ["example.test/b:1"], False),
    "example.test/c:1": (ID_C, ["example.test/c:1"], True),
}


def status(raw: bytes) -> remove.ImageNamed:
    return IMAGES.get(cri_pb2.RemoveImageRequest.FromString(raw).image.image)


def guard(rows: list[ImageRow], allow: bool = False, runtime: str = "containerd") -> tuple[remove.RemoveGuard, FakePins]:
    pins = FakePins(rows, runtime)
    return remove.RemoveGuard(pins, status, allow, None, Logged()), pins  # type: ignore[arg-type]


def test_a_labelled_image_is_refused_by_reference_and_by_id_with_one_line_naming_pin_and_fix() -> None:
    checked, pins = guard([row("example.test/a:1", ID_A, Reason(REASON_LABEL, "example.test/a:1")),
                           row("example.test/b:1", ID_B)])
    for ref in ("example.test/a:1", ID_A):
        decision = checked.decide(request(ref))
        assert decision.refused and decision.image_id == ID_A
        assert "\n" not in decision.message
        assert decision.message.startswith(f"cri-proxy refused to remove {ref}")
        assert "the pin label on example.test/a:1" in decision.message
        assert "pinctl unpin example.test/a:1" in decision.message and "--allow-remove-pinned" in decision.message
    assert pins.reads == 2  # read again for each call
    assert checked.decide(request("example.test/b:1")) == remove.Decision("example.test/b:1", ID_B)


def test_each_kind_of_pin_is_named_with_its_own_fix() -> None:
    pattern = Reason(REASON_PATTERN, "example.test/a:*", "/etc/pinctl/config.toml")
    decision = guard([row("example.test/a:1", ID_A, pattern)])[0].decide(request(ID_A))
    assert "policy pattern example.test/a:* (/etc/pinctl/config.toml)" in decision.message
    assert "drop the pattern example.test/a:* from the policy" in decision.message
    # The runtime's own pins count when the runtime reports them (c:1 is reported pinned), by name.
    crio = Reason(REASON_CRIO_PIN, "example.test/c:1", "/etc/crio/crio.conf.d/zz-pinctl.conf:3")
    assert "pinctl's CRI-O pin" in guard([row("example.test/c:1", ID_C, crio, namespace="")],
                                         runtime="cri-o")[0].decide(request("example.test/c:1")).message
    config = Reason(REASON_CONTAINERD_CONFIG, "/etc/containerd/config.toml:12")
    assert "containerd pinned_images" in guard([row("example.test/c:1", ID_C, config)])[0].decide(
        request("example.test/c:1")).message
    # Not yet in effect (CRI-O not reloaded): the lists do not say pinned, nor does the refusal.
    assert not guard([row("example.test/a:1", ID_A, crio, namespace="")], runtime="cri-o")[0].decide(
        request(ID_A)).refused


def test_what_the_proxy_does_not_report_pinned_is_not_defended() -> None:
    ineffective = Reason(REASON_INEFFECTIVE_LABEL, "example.test/a:1: another namespace")
    assert not guard([row("example.test/a:1", ID_A, ineffective)])[0].decide(request(ID_A)).refused
    # The label counts only in the namespace the runtime reads.
    elsewhere = row("example.test/a:1", ID_A, Reason(REASON_LABEL, "example.test/a:1"), namespace="other")
    assert not guard([elsewhere])[0].decide(request(ID_A)).refused


def test_the_runtimes_own_pin_defends_too_and_unknown_images_pass() -> None:
    checked, _ = guard([])
    assert "the runtime's own pin" in checked.decide(request("example.test/c:1")).message
    unknown = checked.decide(request("example.test/nowhere:1"))
    assert unknown == remove.Decision("example.test/nowhere:1")


def test_an_image_pinctl_has_no_id_for_is_matched_by_name() -> None:
    checked, _ = guard([row("example.test/b:1", None, Reason(REASON_PATTERN, "example.test/b:1"))])
    assert checked.decide(request("example.test/b:1")).refused


def test_allow_remove_pinned_forwards_and_keeps_the_pin_for_the_journal() -> None:
    checked, _ = guard([row("example.test/a:1", ID_A, Reason(REASON_LABEL, "example.test/a:1"))], allow=True)
    decision = checked.decide(request(ID_A))
    assert not decision.refused and decision.pin == "the pin label on example.test/a:1"


def test_unreadable_pins_or_runtime_forward_the_call() -> None:
    checked, pins = guard([row("example.test/a:1", ID_A, Reason(REASON_LABEL, "example.test/a:1"))])
    pins.fail = True
    assert not checked.decide(request(ID_A)).refused

    def broken(raw: bytes) -> remove.ImageNamed:
        raise OSError("runtime gone")

    unreachable = remove.RemoveGuard(FakePins([]), broken, False, None, Logged())  # type: ignore[arg-type]
    assert unreachable.decide(request(ID_A)) == remove.Decision(ID_A)
    assert unreachable.decide(b"\xff\xff") == remove.Decision("")


def test_every_outcome_is_journaled_with_the_caller(tmp_path: Path) -> None:
    writer = remove.JournalWriter(str(tmp_path), Logged())
    pins = FakePins([row("example.test/a:1", ID_A, Reason(REASON_LABEL, "example.test/a:1")), row("example.test/b:1", ID_B)])
    checked = remove.RemoveGuard(pins, status, False, writer, Logged())  # type: ignore[arg-type]
    me = remove.caller_from_pid(os.getpid())
    assert me.name and me.pid == os.getpid()
    refused = checked.decide(request(ID_A))
    checked.record(refused, me, REQUEST_REFUSED)
    plain = checked.decide(request("example.test/b:1"))
    checked.record(plain, me, REQUEST_FORWARDED)
    checked.record(plain, remove.Caller(), REQUEST_FAILED, "NOT_FOUND: no such image")
    writer.close()
    entries = Journal(str(tmp_path)).read().entries
    assert [(e.ref, e.outcome, e.image_id, e.client, e.pid, e.detail) for e in entries
            if isinstance(e, RemoveRequest)] == [
        (ID_A, REQUEST_REFUSED, ID_A, me.name, me.pid, "the pin label on example.test/a:1"),
        ("example.test/b:1", REQUEST_FORWARDED, ID_B, me.name, me.pid, ""),
        ("example.test/b:1", REQUEST_FAILED, ID_B, "", 0, "NOT_FOUND: no such image")]
    assert checked.outcomes == {REQUEST_REFUSED: 1, REQUEST_FORWARDED: 1, REQUEST_FAILED: 1}


def test_an_unwritable_journal_is_one_warning(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    logged = Logged()
    writer = remove.JournalWriter(str(blocker / "history"), logged)
    for _ in range(3):
        writer.put(RemoveRequest(time.time(), "example.test/a:1", REQUEST_FORWARDED))
    writer.close()
    assert [level for level, message in logged.lines if "cannot write the journal" in message] == ["warning"]


def test_a_gone_process_has_no_name() -> None:
    assert remove.process_name(0) == "" and remove.caller_from_pid(-1) == remove.Caller()


def test_the_relay_channel_decides_and_journals_by_id(tmp_path: Path) -> None:
    """relay.py's side of `remove` and `removed`, without a relay: what it sends back, what it records."""
    writer = remove.JournalWriter(str(tmp_path), Logged())
    pins = FakePins([row("example.test/a:1", ID_A, Reason(REASON_LABEL, "example.test/a:1")), row("example.test/b:1", ID_B)])
    checked = remove.RemoveGuard(pins, status, False, writer, Logged())  # type: ignore[arg-type]
    relay = Relay("/bin/true", "/l", "/u", lambda: None, Logged(), checked)
    sent: list[dict[str, object]] = []
    relay._send = sent.append  # type: ignore[method-assign,assignment]
    import base64

    for number, ref in ((1, ID_A), (2, "example.test/b:1"), (3, "example.test/b:1")):
        relay._answer_remove({"type": "remove", "id": number, "pid": 7, "client": "kubelet",
                              "request": base64.b64encode(request(ref)).decode()})
    assert [(m["id"], m.get("refuse", False)) for m in sent] == [(1, True), (2, False), (3, False)]
    assert "refused to remove" in str(sent[0]["message"])
    relay._removed({"type": "removed", "id": 2})
    relay._removed({"type": "removed", "id": 3, "code": 5, "message": "no such image"})
    relay._removed({"type": "removed", "id": 99})  # unknown: nothing
    writer.close()
    entries = [e for e in Journal(str(tmp_path)).read().entries if isinstance(e, RemoveRequest)]
    assert [(e.outcome, e.client, e.pid, e.detail) for e in entries] == [
        (REQUEST_REFUSED, "kubelet", 7, "the pin label on example.test/a:1"),
        (REQUEST_FORWARDED, "kubelet", 7, ""), (REQUEST_FAILED, "kubelet", 7, "NOT_FOUND: no such image")]


@pytest.mark.parametrize("peer", ["", "unix:", "ipv4:127.0.0.1:1", "unix-abstract:someone-else"])
def test_an_unknown_peer_is_an_unknown_caller(peer: str, tmp_path: Path) -> None:
    from pinctl.criproxy.peers import PeerJoiner

    joiner = PeerJoiner(str(tmp_path / "s.sock"), 0o660)
    try:
        assert joiner.caller(peer) == remove.Caller()
    finally:
        joiner.close()

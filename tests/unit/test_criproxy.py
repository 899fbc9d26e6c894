"""cri-proxy's pure parts: which images it reports pinned, how answers are rewritten, how often
the pins are read. The forwarding itself is tested against real runtimes (tests/integration)."""

from __future__ import annotations

from typing import Any, Optional

from pinctl.config.loader import PatternEntry
from pinctl.criproxy import pins as proxy_pins
from pinctl.criproxy import proxy as criproxy
from pinctl.errors import ConfigError, EngineUnreachable
from pinctl.model import REASON_LABEL, REASON_PATTERN, REASON_SANDBOX, Descriptor, ImageRow, Reason
from pinctl.pins.policy import compile_policy
from pinctl.proto import cri_pb2

MEDIA = "application/vnd.oci.image.manifest.v1+json"


def row(ref: str, image_id: Optional[str], namespace: str = "k8s.io", *reasons: Reason) -> ImageRow:
    return ImageRow(namespace, ref, image_id, Descriptor(MEDIA, "sha256:m-" + ref, 1), 1, {}, reasons=list(reasons))


def listing(*images: tuple[str, list[str], bool]) -> bytes:
    reply = cri_pb2.ListImagesResponse()
    for image_id, tags, pinned in images:
        reply.images.add(id=image_id, repo_tags=tags, size=7, pinned=pinned)
    return reply.SerializeToString()


def pinned(reply: bytes) -> dict[str, bool]:
    return {image.id: image.pinned for image in cri_pb2.ListImagesResponse.FromString(reply).images}


def test_labels_count_only_in_the_runtimes_namespace() -> None:
    rows = [row("a:1", "sha256:a", "k8s.io", Reason(REASON_LABEL, "a:1")),
            row("b:1", "sha256:b", "moby", Reason(REASON_LABEL, "b:1"))]
    assert proxy_pins.pinned_keys(rows, "containerd").ids == {"sha256:a"}
    assert proxy_pins.pinned_keys(rows, "docker").ids == {"sha256:b"}
    assert proxy_pins.pinned_keys(rows, "cri-o").ids == frozenset()


def test_patterns_and_sandbox_count_anywhere() -> None:
    rows = [row("p:1", "sha256:p", "moby", Reason(REASON_PATTERN, "p:*")),
            row("s:1", "sha256:s", "k8s.io", Reason(REASON_SANDBOX, "s:1")), row("n:1", "sha256:n")]
    keys = proxy_pins.pinned_keys(rows, "containerd")
    assert keys.ids == {"sha256:p", "sha256:s"} and keys.known_ids == {"sha256:p", "sha256:s", "sha256:n"}


def test_rewrite_adds_pins_never_removes_and_keeps_other_fields() -> None:
    keys = proxy_pins.pinned_keys([row("a:1", "sha256:a", "k8s.io", Reason(REASON_PATTERN, "a:*")),
                                 row("c:1", "sha256:c")], "containerd")
    reply = listing(("sha256:a", ["a:1"], False), ("sha256:b", ["b:1"], True), ("sha256:c", ["c:1"], False))
    rewritten = proxy_pins.rewrite(criproxy.LIST_IMAGES, reply, keys)
    assert pinned(rewritten) == {"sha256:a": True, "sha256:b": True, "sha256:c": False}
    before = cri_pb2.ListImagesResponse.FromString(reply)
    before.images[0].pinned = True
    assert cri_pb2.ListImagesResponse.FromString(rewritten) == before


def test_an_unknown_id_is_matched_by_name() -> None:
    keys = proxy_pins.pinned_keys([row("a:1", None, "k8s.io", Reason(REASON_PATTERN, "a:*"))], "containerd")
    reply = listing(("sha256:other", ["a:1"], False), ("sha256:x", ["x:1"], False))
    assert pinned(proxy_pins.rewrite(criproxy.LIST_IMAGES, reply, keys)) == {"sha256:other": True, "sha256:x": False}


def test_unchanged_answers_are_the_same_bytes() -> None:
    keys = proxy_pins.pinned_keys([row("a:1", "sha256:a", "k8s.io", Reason(REASON_PATTERN, "a:*"))], "containerd")
    reply = listing(("sha256:b", ["b:1"], False))
    assert proxy_pins.rewrite(criproxy.LIST_IMAGES, reply, keys) is reply
    empty = cri_pb2.ImageStatusResponse().SerializeToString()
    assert proxy_pins.rewrite(criproxy.IMAGE_STATUS, empty, keys) is empty


def test_image_status_is_rewritten() -> None:
    keys = proxy_pins.pinned_keys([row("a:1", "sha256:a", "k8s.io", Reason(REASON_PATTERN, "a:*"))], "containerd")
    status = cri_pb2.ImageStatusResponse(image=cri_pb2.Image(id="sha256:a", repo_tags=["a:1"]),
                                         info={"info": "{}"}).SerializeToString()
    found = cri_pb2.ImageStatusResponse.FromString(proxy_pins.rewrite(criproxy.IMAGE_STATUS, status, keys))
    assert found.image.pinned is True and dict(found.info) == {"info": "{}"}


class FakeNode:
    def __init__(self, rows: list[ImageRow]) -> None:
        self.listed = rows
        self.fail = False
        self.reads = 0

    def rows(self, policy: Any, runtime_sizes: bool = True) -> Any:
        self.reads += 1
        if self.fail:
            raise EngineUnreachable("containerd is down")
        return type("Listing", (), {"rows": self.listed})()

    def forget_lists(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_pins_are_read_only_when_asked_and_a_failed_read_keeps_the_last_set() -> None:
    node = FakeNode([row("a:1", "sha256:a", "k8s.io", Reason(REASON_LABEL, "a:1"))])
    logged: list[str] = []
    setup = proxy_pins.ProxySetup(lambda: node, compile_policy([]))  # type: ignore[arg-type, return-value]
    pins = proxy_pins.PinnedSet(lambda: setup, lambda: "containerd", lambda level, msg, **_: logged.append(msg))
    assert pins.current() is None and node.reads == 0, "a call never reads"
    assert pins.refresh() is not None and node.reads == 1
    assert pins.current() is not None and node.reads == 1
    node.fail = True
    kept = pins.refresh()
    assert kept is not None and kept.ids == {"sha256:a"} and node.reads == 2, "the last set read stays in use"
    assert pins.failing and logged[-1] == "cannot read pins; answers keep the pins read last"
    node.fail = False
    keys = pins.refresh()
    assert keys is not None and keys.ids == {"sha256:a"} and "pins readable again" in logged[-1]
    never = proxy_pins.PinnedSet(lambda: setup, lambda: "containerd", lambda level, msg, **_: logged.append(msg))
    node.fail = True
    assert never.refresh() is None and logged[-1] == "cannot read pins; answers pass through unchanged"


def test_a_reload_reads_the_config_at_once_and_a_broken_one_keeps_the_one_in_use() -> None:
    class PolicyNode(FakeNode):
        def rows(self, policy: Any, runtime_sizes: bool = True) -> Any:
            self.reads += 1
            wanted = {pattern.text for pattern in policy.patterns}
            return type("Listing", (), {"rows": [row(ref, f"sha256:{ref[0]}", "k8s.io", Reason(REASON_PATTERN, ref))
                                                 for ref in ("a:1", "b:1") if ref in wanted]})()

    node = PolicyNode([])
    policies = iter([["a:1"], None, ["b:1"]])
    logged: list[str] = []

    def load() -> proxy_pins.ProxySetup:
        patterns = next(policies)
        if patterns is None:
            raise ConfigError("config.toml:1: unknown key 'pinned'")
        return proxy_pins.ProxySetup(lambda: node, compile_policy(  # type: ignore[arg-type, return-value]
            [PatternEntry(text, "config.toml:1", "pinctl") for text in patterns]), ("/etc/pinctl/config.toml",))

    pins = proxy_pins.PinnedSet(load, lambda: "containerd", lambda level, msg, **_: logged.append(msg))
    pins.prepare()
    assert pins.config_paths() == ("/etc/pinctl/config.toml",) and logged == ["config loaded"]
    assert node.reads == 0, "the images are read by the feed, not by prepare"
    keys = pins.refresh()
    assert keys is not None and keys.ids == {"sha256:a"}
    assert not pins.reload()
    assert logged[-1] == "config reload failed, keeping the previous one"
    assert dict(pins.reloads) == {"ok": 0, "failed": 1} and not pins.last_reload_ok
    keys = pins.current()
    assert keys is not None and keys.ids == {"sha256:a"} and node.reads == 1, "the pins in use stay"
    read_in_reload: list[Any] = []
    assert pins.reload(then=lambda: read_in_reload.append(pins.refresh())) and logged[-1] == "config reloaded"
    assert dict(pins.reloads) == {"ok": 1, "failed": 1} and pins.last_reload_ok
    keys = read_in_reload[0]
    assert keys is not None and keys.ids == {"sha256:b"} and node.reads == 2, "read with the new config"

"""Joining Docker's view with its containerd namespace, config-label pins and classic-store refusals (pure logic)."""

from __future__ import annotations

import pytest

from pinctl import refs
from pinctl.backends.docker import DockerImage, ImageStoreKind
from pinctl.config.loader import PatternEntry
from pinctl.model import Descriptor, ImageRow
from pinctl.node.docker import DockerView, join, mark_sandbox
from pinctl.pins.policy import Policy, compile_policy

APP = DockerImage("sha256:" + "a" * 64, ("example.test/app:1", "example.test/app:2"), (), 900, {"team.example/keep": "true"})
TOOL = DockerImage("sha256:" + "b" * 64, ("example.test/tool:1",), ("example.test/tool@sha256:" + "e" * 64,), 800, {})


def view(containerd: bool) -> DockerView:
    from pinctl.backends.docker import DockerEngine

    kind = ImageStoreKind("overlayfs" if containerd else "overlay2", containerd)
    return DockerView(DockerEngine("unix:///d.sock"), kind, "moby", [APP, TOOL])


def moby_row(ref: str, image: DockerImage) -> ImageRow:
    return ImageRow("moby", ref, image.image_id, Descriptor("m", "sha256:" + "c" * 64, 10), image.size, {})


def test_containerd_store_rows_are_joined_not_doubled() -> None:
    rows = [moby_row("example.test/app:1", APP), moby_row("example.test/app:2", APP)]
    joined = join(rows, view(True), [], Policy())
    assert [(r.namespace, r.ref, r.source) for r in joined] == [
        ("moby", "example.test/app:1", "docker"),
        ("moby", "example.test/app:2", "docker"),
        ("moby", "example.test/tool:1", "docker"),  # not in the moby listing: still shown, once
        ("moby", "example.test/tool@sha256:" + "e" * 64, "docker"),  # repo digests are references too
    ]
    assert joined[0].config_labels == {"team.example/keep": "true"}


def test_classic_store_rows_have_no_namespace_and_get_policy_reasons() -> None:
    policy = compile_policy([PatternEntry("example.test/tool:*", "cfg:1", "pinctl")])
    joined = join([], view(False), [], policy)
    tool = next(r for r in joined if r.ref == "example.test/tool:1")
    assert tool.namespace is None and tool.source == "docker"
    assert [(r.kind, r.detail) for r in tool.reasons] == [("pattern", "example.test/tool:*")]
    assert tool.drift == "unlabelled"


def test_config_label_rules_pin_like_cri_dockerd() -> None:
    joined = {r.ref: r for r in join([], view(False), ["team.example/keep=true", "absent"], Policy())}
    app = joined["example.test/app:1"]
    assert app.pinned and [(r.kind, r.detail) for r in app.reasons] == [("docker-label", "team.example/keep=true")]
    assert not joined["example.test/tool:1"].pinned
    key_only = {r.ref: r for r in join([], view(False), ["team.example/keep"], Policy())}
    assert key_only["example.test/app:2"].pinned


def test_classic_refusal_names_the_options() -> None:
    refusal = view(False).classic_refusal(refs.parse_selector("example.test/app:1"))
    assert refusal and "overlay2" in refusal and "containerd image store" in refusal and "docker_pinned_image_labels" in refusal
    assert view(False).classic_refusal(refs.parse_selector("aaaaaaaa")) == refusal
    assert view(False).classic_refusal(refs.parse_selector("example.test/none:1")) is None
    assert view(True).classic_refusal(refs.parse_selector("example.test/app:1")) is None


PAUSE = DockerImage("sha256:" + "f" * 64, ("pause:3.9",), (), 700, {})


def test_cri_dockerds_sandbox_image_is_pinned_by_its_docker_name_as_written() -> None:
    """cri-dockerd compares --pod-infra-container-image with Docker's RepoTags as they are: the
    flag pause:3.9 names the image Docker calls pause:3.9; docker.io/library/pause:3.9 names none."""
    sandbox_view = DockerView(view(False).engine, ImageStoreKind("overlay2", False), "moby", [PAUSE, TOOL])
    for flag, pinned in (("pause:3.9", True), ("docker.io/library/pause:3.9", False), ("pause", False)):
        rows = join([], sandbox_view, [], Policy())
        mark_sandbox(rows, flag)
        pause = next(r for r in rows if r.ref == "docker.io/library/pause:3.9")
        assert pause.pinned is pinned, flag
        assert [r.kind for r in pause.reasons] == (["sandbox"] if pinned else []), flag
        assert not next(r for r in rows if r.ref == "example.test/tool:1").pinned


class _Lister:
    """A Docker engine's image list, counted; or its failure."""

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.calls = 0

    def list_images(self) -> object:
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_a_prefetched_image_list_is_asked_for_once_and_taken_by_images() -> None:
    from pinctl.errors import EngineUnreachable

    lister = _Lister([APP, TOOL])
    prefetched = DockerView(lister, ImageStoreKind("vfs", False), "moby")  # type: ignore[arg-type]
    prefetched.prefetch_images()
    prefetched.prefetch_images()  # a second ask while the first runs starts nothing
    assert prefetched.images == [APP, TOOL] and prefetched.images == [APP, TOOL] and lister.calls == 1

    failing = DockerView(_Lister(EngineUnreachable("Docker at unix:///d.sock did not answer within 2s")),  # type: ignore[arg-type]
                         ImageStoreKind("vfs", False), "moby")
    failing.prefetch_images()
    with pytest.raises(EngineUnreachable, match="did not answer"):  # raised where the list is read, not lost in the thread
        failing.images

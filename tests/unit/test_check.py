"""The causes check gives for each kind of disagreement (pure logic; the engine cases are in integration)."""

from __future__ import annotations

import pytest

from pinctl.backends.cri import CriImage, RuntimeVersion
from pinctl.check.compare import check
from pinctl.model import Descriptor, ImageRow, Reason

ID = "sha256:" + "a" * 64
REF = "example.test/app:1"


def row(namespace: str | None, *reasons: Reason, source: str = "containerd") -> ImageRow:
    return ImageRow(namespace, REF, ID, Descriptor("m", "sha256:" + "d" * 64, 1), 10, {}, reasons=list(reasons), source=source)


def verdict(rows: list[ImageRow], pinned: bool, name: str = "containerd", version: str = "1.7.24") -> tuple[str | None, str | None]:
    result = check(rows, [CriImage(ID, (REF,), (), 10, pinned)], RuntimeVersion(name, version, "v1"), "unix:///x")
    [item] = result.items
    assert result.agree is (item.cause is None)
    return item.cause, item.fix


LABEL_K8S = Reason("label", REF)
PATTERN = Reason("pattern", "example.test/*", "cfg:1")


@pytest.mark.parametrize(
    "rows, pinned, name, version, cause_part, fix_part",
    [
        ([row("k8s.io", LABEL_K8S)], True, "containerd", "1.7.24", None, None),
        ([row("k8s.io")], False, "containerd", "1.7.24", None, None),
        ([row("k8s.io", LABEL_K8S)], False, "containerd", "1.6.20~ds1", "containerd 1.6.20~ds1", "1.7.10+"),
        ([row("k8s.io", LABEL_K8S)], False, "containerd", "1.7.24", "not caught up", "--wait"),
        ([row("k8s.io"), row("moby", LABEL_K8S)], False, "containerd", "1.7.24", "namespace moby", "pinctl pin -n k8s.io"),
        ([row("k8s.io", PATTERN)], False, "containerd", "1.7.24", "pattern known only to pinctl", "pinctl sync"),
        ([row("k8s.io", Reason("ineffective-label", f"{REF}: x=true"))], False, "containerd", "1.7.24", "ineffective", "pinctl pin"),
        ([row("moby", LABEL_K8S, source="docker")], False, "docker", "26.1.5", "cri-dockerd (docker 26.1.5)", "export --for cri-dockerd"),
        ([row(None, Reason("docker-label", "keep"), source="docker")], False, "docker", "26.1.5", "config labels", "--pinned-image-labels"),
        ([row(None, PATTERN, source="docker")], False, "docker", "26.1.5", "pattern known only", "cri-dockerd"),
        ([row("k8s.io", PATTERN)], False, "cri-o", "1.30.0", "CRI-O pins only", "export --for crio"),
        ([row("k8s.io")], True, "containerd", "1.7.24", "nothing pinctl reads explains it", "--containerd-config"),
        ([], True, "containerd", "1.7.24", "nothing pinctl reads explains it", "--from-crio"),
    ],
)
def test_causes(rows: list[ImageRow], pinned: bool, name: str, version: str, cause_part: str | None, fix_part: str | None) -> None:
    cause, fix = verdict(rows, pinned, name, version)
    if cause_part is None:
        assert cause is None and fix is None
    else:
        assert cause and cause_part in cause, cause
        assert fix and fix_part is not None and fix_part in fix, fix


def test_rows_join_on_manifest_digest_too() -> None:
    """Docker's containerd store reports the manifest digest as the image ID."""
    docker_row = row("moby", LABEL_K8S, source="docker")
    cri = CriImage(docker_row.digest, ("example.test/other:1",), (), 10, True)
    [item] = check([docker_row], [cri], RuntimeVersion("containerd", "1.7.24", "v1"), "unix:///x").items
    assert item.desired and item.agrees

"""The causes check gives for each kind of disagreement (pure logic; the engine cases are in integration)."""

from __future__ import annotations

import pytest

from pinctl.backends.cri import CriImage, RuntimeVersion
from pinctl.backends.cri_dockerd import CriDockerd
from pinctl.check.compare import check
from pinctl.model import ConfigPin, Descriptor, ImageRow, Reason

ID = "sha256:" + "a" * 64
REF = "example.test/app:1"


def row(namespace: str | None, *reasons: Reason, source: str = "containerd") -> ImageRow:
    return ImageRow(namespace, REF, ID, Descriptor("m", "sha256:" + "d" * 64, 1), 10, {}, reasons=list(reasons), source=source)


def verdict(rows: list[ImageRow], pinned: bool, name: str = "containerd", version: str = "1.7.24",
            frontend: CriDockerd | None = None) -> tuple[str | None, str | None]:
    result = check(rows, [CriImage(ID, (REF,), (), 10, pinned)], RuntimeVersion(name, version, "v1"), "unix:///x",
                   frontend=frontend)
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
        # containerd's sandbox image without the label it will not put back: the pin is what fixes it.
        ([row("k8s.io", Reason("sandbox", REF), Reason("unlabelled-sandbox", "containerd 1.7.24 labels it only when"))],
         False, "containerd", "1.7.24", "the CRI sandbox image, unpinned: containerd 1.7.24 labels it only when",
         f"pinctl pin {REF}"),
        ([row("k8s.io", Reason("sandbox", REF), Reason("unlabelled-sandbox", "x"), PATTERN)], False, "containerd",
         "1.7.24", "the CRI sandbox image, unpinned", f"pinctl pin {REF}"),
        # 2.x relabels the record its pinned_images.sandbox names: a missing label is one it has not put back yet.
        ([row("k8s.io", Reason("sandbox", REF))], False, "containerd", "2.1.9", "has not yet", "--wait"),
        ([row("k8s.io", Reason("sandbox", REF), LABEL_K8S)], True, "containerd", "1.7.24", None, None),
        ([row(None, PATTERN)], False, "cri-o", "1.34.0", "pattern known only to pinctl", "pinctl sync"),
        ([row(None, Reason("crio-config", "x*", "f:1"))], False, "cri-o", "1.34.0", "has not re-read its configuration",
         "systemctl reload crio"),
        ([row(None, Reason("sandbox", "p:1", "f:2"))], False, "cri-o", "1.34.0", "has not re-read", "reload crio"),
        ([row(None)], True, "cri-o", "1.34.0", "has not re-read its configuration", "reload crio"),
        ([row("k8s.io")], True, "containerd", "1.7.24", "nothing pinctl reads explains it", "--containerd-config"),
        ([], True, "containerd", "1.7.24", "nothing pinctl reads explains it", "--containerd-config"),
    ],
)
def test_causes(rows: list[ImageRow], pinned: bool, name: str, version: str, cause_part: str | None, fix_part: str | None) -> None:
    cause, fix = verdict(rows, pinned, name, version)
    if cause_part is None:
        assert cause is None and fix is None
    else:
        assert cause and cause_part in cause, cause
        assert fix and fix_part is not None and fix_part in fix, fix


OLD_CDD = CriDockerd(1, "0.4.3", False, "example.test/pause:3.9")
NEW_CDD = CriDockerd(2, "0.4.7", True, None, ("example.test/keep:*",), ("team.example/keep=yes",))


@pytest.mark.parametrize(
    "rows, frontend, cause_part, fix_part",
    [
        # The seed: a label in moby, cri-dockerd without selectors: only the proxy makes it count.
        ([row("moby", LABEL_K8S, source="docker")], OLD_CDD, "cri-dockerd 0.4.3 pins only its sandbox image",
         "pinctl cri-proxy --listen /run/pinctl/cri-proxy.sock -r unix:///x"),
        ([row("moby", PATTERN, source="docker")], OLD_CDD, "cri-dockerd 0.4.3 pins only", "pinctl cri-proxy"),
        ([row("moby", LABEL_K8S, source="docker")], NEW_CDD, "cri-dockerd 0.4.7", "export --for cri-dockerd"),
        ([row(None, Reason("docker-label", "keep"), source="docker")], NEW_CDD, "config labels",
         "--pinned-image-labels"),
        ([row(None, PATTERN, source="docker")], NEW_CDD, "pattern known only", "start cri-dockerd 0.4.7"),
        # Its process not found: both fixes, each with the releases it is for.
        ([row("moby", LABEL_K8S, source="docker")], None, "release unknown", "before 0.4.7: serve the kubelet"),
    ],
)
def test_cri_dockerd_causes_follow_its_release(rows: list[ImageRow], frontend: CriDockerd | None, cause_part: str,
                                               fix_part: str) -> None:
    cause, fix = verdict(rows, False, "docker", "26.1.5", frontend)
    assert cause and cause_part in cause, cause
    assert fix and fix_part in fix, fix


@pytest.mark.parametrize(
    "frontend, tags, labels, detail_part",
    [
        (OLD_CDD, ("example.test/pause:3.9",), {}, "--pod-infra-container-image"),
        (NEW_CDD, ("example.test/keep:2",), {}, "--pinned-images example.test/keep:*"),
        (NEW_CDD, ("example.test/other:1",), {"team.example/keep": "yes"}, "--pinned-image-labels team.example/keep=yes"),
        (CriDockerd(3, "0.4.3", False), ("example.test/pause:3.10",), {}, "default sandbox image"),
        (OLD_CDD, ("example.test/other:1",), {}, "the runtime's own pin: cri-dockerd 0.4.3"),
        (None, ("example.test/other:1",), {}, "the runtime's own pin"),
    ],
)
def test_a_pin_cri_dockerd_makes_itself_is_explained(frontend: CriDockerd | None, tags: tuple[str, ...],
                                                     labels: dict[str, str], detail_part: str) -> None:
    """cri-dockerd pins its sandbox image and what its flags name: check agrees and says which."""
    docker_row = ImageRow("moby", tags[0], ID, Descriptor("m", ID, 1), 10, {}, source="docker", config_labels=labels)
    result = check([docker_row], [CriImage(ID, tags, (), 10, True)], RuntimeVersion("docker", "26.1.5", "v1"),
                   "unix:///x", frontend=frontend)
    [item] = result.items
    assert result.agree and item.desired
    assert [r.kind for r in item.reasons] == ["sandbox"] and detail_part in item.reasons[0].detail


def test_rows_join_on_manifest_digest_too() -> None:
    """Docker's containerd store reports the manifest digest as the image ID."""
    docker_row = row("moby", LABEL_K8S, source="docker")
    cri = CriImage(docker_row.digest, ("example.test/other:1",), (), 10, True)
    [item] = check([docker_row], [cri], RuntimeVersion("containerd", "1.7.24", "v1"), "unix:///x").items
    assert item.desired and item.agrees


@pytest.mark.parametrize("version, fix", [
    ("1.7.24", "pinctl sync"),  # 1.x has no pinned_images: config export refuses it
    ("1.6.36", "pinctl sync"),
    ("2.1.9", "pinctl sync (or pinctl config export --for containerd)"),
])
def test_a_pattern_only_fix_names_config_export_only_where_containerd_reads_it(version: str, fix: str) -> None:
    assert verdict([row("k8s.io", PATTERN)], False, "containerd", version)[1] == fix


@pytest.mark.parametrize(("version", "entry", "dead"), [
    ("2.1.9", "example.test/app", True),  # tagless: containerd compares it as written
    ("2.1.9", "example.test/app:latest", False),  # the full name pins (the CRI would say so)
    ("1.7.24", "example.test/app", False),  # 1.x has no pinned_images: nothing to name
])
def test_a_containerd_entry_that_pins_nothing_is_named_beside_its_image(version: str, entry: str, dead: bool) -> None:
    latest = "example.test/app:latest"
    pins = [ConfigPin("tools", entry, "/etc/containerd/conf.d/10.toml", 4)]
    result = check([row("k8s.io")], [CriImage(ID, (latest,), (), 10, False)],
                   RuntimeVersion("containerd", version, "v1"), "unix:///x", config_pins=pins)
    [item] = result.items
    assert result.agree is not dead and item.desired is dead
    if dead:
        assert item.mismatch == "dead-entry"
        assert "pins nothing on containerd 2.1.9:" in (item.cause or "") and "/etc/containerd/conf.d/10.toml:4" in (item.cause or "")
        assert repr(latest) in (item.fix or "") and f"pinctl pin {latest}" in (item.fix or "")

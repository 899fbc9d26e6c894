"""pinctl check and ls --cri against the CRI of real containerd 1.7 and 2.1 (honour labels) and 1.6.20 (does not)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import one_containerd
from tests.harness import cri, images
from tests.harness.containerd import ContainerdDaemon
from tests.integration.pinctl_runner import assert_one_line_error, pinctl

PIN = "io.cri-containerd.pinned"
LoadImages = Callable[..., list[images.ImageInfo]]
APP = "example.test/chk-app:1"


def check(daemon: ContainerdDaemon, *args: str, expect: int) -> dict[str, Any]:
    result = pinctl(daemon, "check", "--runtime-endpoint", f"unix://{daemon.address}", "-o", "json", *args)
    assert result.returncode == expect, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def item(doc: dict[str, Any], ref: str) -> dict[str, Any]:
    return next(i for i in doc["images"] if ref in i["refs"])


@pytest.fixture
def ctd(modern_containerd: ContainerdDaemon) -> ContainerdDaemon:
    """containerd 1.7, then 2.1 (each test runs on both), k8s.io holding only the sandbox image."""
    return modern_containerd


def test_check_fails_before_pin_and_passes_after(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    load_images(ctd, [images.recipe(APP, seed="chk")])
    doc = check(ctd, "--pinned-image", APP, expect=1)
    # Debian's 2.1 says 2.1.9+unknown over the CRI (its build stamps no revision), ctr 2.1.9.
    assert doc["runtime"]["name"] == "containerd" and doc["runtime"]["version"].lstrip("v").startswith(ctd.version)
    found = item(doc, APP)
    assert found["wanted"] is True and found["cri_pinned"] is False and found["agrees"] is False
    assert "pattern known only to pinctl" in found["cause"] and "pinctl sync" in found["fix"]
    assert pinctl(ctd, "pin", APP).returncode == 0
    doc = check(ctd, "--pinned-image", APP, "--wait", "60", expect=0)
    assert doc["agree"] is True and item(doc, APP)["cri_pinned"] is True
    table = pinctl(ctd, "check", "--runtime-endpoint", ctd.address)
    assert table.returncode == 0 and table.stdout == "" and "agree" in table.stderr


def test_wrong_namespace_and_ineffective_label(ctd: ContainerdDaemon, load_images: LoadImages,
                                               fresh_namespace: Callable[[ContainerdDaemon], str]) -> None:
    load_images(ctd, [images.recipe(APP, seed="chk"), images.recipe("example.test/chk-true:1", seed="t")])
    load_images(ctd, [images.recipe(APP, seed="chk")], "moby")
    ctd.label_image(APP, {PIN: "pinned"}, namespace="moby")
    ctd.ctr("images", "label", "example.test/chk-true:1", PIN)  # stores "true"
    try:
        doc = check(ctd, expect=1)
        wrong = item(doc, APP)
        assert "namespace moby" in wrong["cause"] and wrong["fix"] == f"pinctl pin -n k8s.io {APP}"
        bad = item(doc, "example.test/chk-true:1")
        assert bad["cause"].startswith("ineffective label") and "pinctl pin" in bad["fix"]
    finally:
        ctd.clear_images("moby")


def test_sandbox_agrees(ctd: ContainerdDaemon) -> None:
    doc = check(ctd, expect=0)
    sandbox = item(doc, ctd.sandbox_image)
    assert sandbox["cri_pinned"] is True and sandbox["agrees"] is True
    assert {"kind": "sandbox", "detail": ctd.sandbox_image} in sandbox["reasons"]


def test_containerd_16_ignores_labels(containerd16: ContainerdDaemon,
                                      clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
                                      load_images: LoadImages) -> None:
    daemon = clean_k8s_io(containerd16)
    load_images(daemon, [images.recipe(APP, seed="chk")])
    assert pinctl(daemon, "pin", APP).returncode == 0
    doc = check(daemon, expect=1)
    found = item(doc, APP)
    assert found["wanted"] is True and found["cri_pinned"] is False
    assert "ignores labels" in found["cause"] and "1.6.20" in found["cause"]
    assert "1.6.25" in found["fix"]


def test_ls_cri_column(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    load_images(ctd, [images.recipe(APP, "example.test/chk-app:latest", seed="chk")])
    ctd.label_image(APP, {PIN: "pinned"})
    cri.wait_for(ctd.address, lambda imgs: any(APP in i.repo_tags and i.pinned for i in imgs), 60)
    result = pinctl(ctd, "ls", "--cri", "-o", "json", env={"CONTAINER_RUNTIME_ENDPOINT": f"unix://{ctd.address}"})
    rows = {img["ref"]: img for img in json.loads(result.stdout)["images"]}
    assert rows["example.test/chk-app:latest"]["cri_pinned"] is True
    table = pinctl(ctd, "ls", "--cri", APP, env={"CONTAINER_RUNTIME_ENDPOINT": ctd.address}).stdout
    assert "CRI PINNED" in table.splitlines()[0]


def test_discovery_names_the_runtime_it_found(ctd: ContainerdDaemon) -> None:
    # CONTAINERD_ADDRESS is set by the runner: discovery tries it before the usual sockets.
    result = pinctl(ctd, "check", "-o", "json")
    assert result.returncode == 0, result.stderr
    # As the daemon says it: 2.4.2 says "v2.4.2", Debian's builds "2.1.9~ds1".
    assert re.search(rf"using unix://{re.escape(ctd.address)} \(containerd v?{re.escape(ctd.version)}", result.stderr)


@one_containerd  # no containerd is asked
def test_unreachable_endpoint(ctd: ContainerdDaemon, tmp_path: Path) -> None:
    result = pinctl(ctd, "check", "--runtime-endpoint", f"unix://{tmp_path}/gone.sock")
    assert_one_line_error(result, 1, "gone.sock", "does not exist", "--runtime-endpoint")


@one_containerd  # no containerd is asked
def test_socket_that_is_not_cri(ctd: ContainerdDaemon, grpc_without_services: Path) -> None:
    result = pinctl(ctd, "check", "--runtime-endpoint", str(grpc_without_services))
    assert_one_line_error(result, 1, str(grpc_without_services), "does not speak the CRI (runtime.v1)")


@one_containerd  # no containerd is asked
def test_runtime_timeout(ctd: ContainerdDaemon, mute_socket: Path) -> None:
    result = pinctl(ctd, "check", "--runtime-endpoint", str(mute_socket), "--timeout", "0.5")
    assert_one_line_error(result, 1, str(mute_socket), "did not answer within 0.5s")


def test_check_named_images_through_image_status(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    load_images(ctd, [images.recipe(APP, seed="chk"), images.recipe("example.test/chk-other:1", seed="o")])
    assert pinctl(ctd, "pin", APP).returncode == 0
    doc = check(ctd, APP, "--wait", "60", expect=0)
    assert [i["refs"] for i in doc["images"]] == [[APP]] and doc["images"][0]["cri_pinned"] is True
    doc = check(ctd, APP, "example.test/chk-gone:1", expect=1)
    gone = item(doc, "example.test/chk-gone:1")
    assert gone["cause"] == "the runtime knows no image by this name"

"""The newcomer's options against real containerd 1.7: ctr's -a and crictl's -r, the largest
--timeout, and `ls -q --pinned`, what completing unpin's references asks for."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.harness import images
from tests.harness.containerd import ContainerdDaemon
from tests.integration.pinctl_runner import pinctl

LoadImages = Callable[..., list[images.ImageInfo]]
PINNED = "example.test/opts/kept:1"
UNPINNED = ("example.test/opts/loose:1", "example.test/opts/loose:2")
NOWHERE = {"CONTAINERD_ADDRESS": "/nonexistent/containerd.sock", "CONTAINER_RUNTIME_ENDPOINT": ""}


@pytest.fixture
def ctd17(containerd17: ContainerdDaemon, clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
          load_images: LoadImages) -> ContainerdDaemon:
    daemon = clean_k8s_io(containerd17)
    load_images(daemon, [images.recipe(PINNED, seed="opts-kept"), images.recipe(*UNPINNED, seed="opts-loose")])
    daemon.label_image(PINNED, {"io.cri-containerd.pinned": "pinned"})
    return daemon


@pytest.mark.parametrize("where", ["before", "after"])
def test_short_a_reaches_containerd_with_the_largest_timeout(ctd17: ContainerdDaemon, where: str) -> None:
    options = ["-a", ctd17.address, "--timeout", "86400"]
    argv = [*options, "ls", "-o", "json"] if where == "before" else ["ls", "-o", "json", *options]
    result = pinctl(ctd17, *argv, env=NOWHERE)  # the environment points nowhere: only -a can find it
    assert result.returncode == 0, result.stderr
    refs = {row["ref"] for row in json.loads(result.stdout)["images"]}
    assert {PINNED, *UNPINNED} <= refs


def test_short_r_reaches_the_cri(ctd17: ContainerdDaemon) -> None:
    result = pinctl(ctd17, "check", "-r", f"unix://{ctd17.address}", "--timeout", "86400", "-o", "json",
                    env={"CONTAINER_RUNTIME_ENDPOINT": "unix:///nonexistent/cri.sock"})
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["runtime"]["name"] == "containerd" and document["agree"] is True


def test_ls_q_pinned_lists_every_ref_of_pinned_images_only(ctd17: ContainerdDaemon) -> None:
    result = pinctl(ctd17, "ls", "-q", "--pinned", "-n", "k8s.io")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    listed = result.stdout.splitlines()
    assert PINNED in listed and not set(UNPINNED) & set(listed)
    assert len(listed) == len(set(listed))
    # Every ref ctr shows with the same target as the pinned one (the CRI's sha256:<id> too).
    by_ref = {image.ref: image for image in ctd17.images()}
    same_image = {ref for ref, image in by_ref.items() if image.digest == by_ref[PINNED].digest}
    assert same_image <= set(listed) and len(same_image) >= 2

"""pinctl history, and the pointers of ls and check, on real containerd (1.7, 2.1, 2.4.2): an image
the policy wants is deleted with ctr, the journal holds its deletion as the watcher writes it
(the Journal class; the watcher's side is tested by its own tests), and every command an
operator reaches for says who deleted it. history itself asks no daemon. Then the same on
Docker (its short names) and on CRI-O."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import one_containerd
from tests.harness import cri, images
from tests.harness import registry as reg
from tests.harness.containerd import ContainerdDaemon
from tests.harness.crictl import Crictl
from tests.harness.crio import CrioDaemon
from tests.harness.crio_fixtures import pull, registry_path
from tests.harness.docker import DockerDaemon, load_images_docker, reset_docker
from tests.integration.pinctl_runner import pinctl

from pinctl.refs import DEFAULT_DOMAIN

from pinctl.journal import DELETER_OUTSIDE_CRI, Deletion
from pinctl.journal.store import Journal

LoadImages = Callable[..., list[images.ImageInfo]]
GONE = "example.test/hist-gone:1"
KEPT = "example.test/hist-kept:1"


@one_containerd  # the journal's pointers are pinctl's; deletions per engine: test_watch_history
def test_ls_check_and_history_name_who_deleted_a_wanted_image(modern_containerd: ContainerdDaemon,
                                                               load_images: LoadImages, tmp_path: Path) -> None:
    ctd = modern_containerd
    gone, _kept = load_images(ctd, [images.recipe(GONE, seed="hist-gone"), images.recipe(KEPT, seed="hist-kept")])
    journal = tmp_path / "history"
    env = {"PINCTL_HISTORY_DIR": str(journal), "PINCTL_PINNED_IMAGES": f"{GONE},{KEPT}"}
    present = pinctl(ctd, "ls", env=env)
    assert present.returncode == 0 and "history" not in present.stderr, present.stderr

    # ctr deletes the image (its name and the sha256: reference containerd's CRI added), and the
    # journal records it as sync --watch does.
    image_id = gone.config_digest
    ctd.remove_images([GONE, image_id])
    cri.wait_for(ctd.address, lambda listed: all(image.id != image_id for image in listed))
    Journal(str(journal)).append(Deletion(
        time=time.time() - 5 * 3600 - 60, runtime="containerd", namespace="k8s.io", refs=(GONE, image_id), image_id=image_id,
        size=gone.size, wanted=(f"pattern {GONE}",), pinned=("label",), deleter=DELETER_OUTSIDE_CRI,
        evidence="cri-proxy served and saw no RemoveImage"))

    listed = pinctl(ctd, "ls", env=env)
    assert listed.returncode == 0 and KEPT in listed.stdout and GONE not in listed.stdout
    assert (f"pinctl: ls: {GONE}, wanted by the policy (env PINCTL_PINNED_IMAGES), is not on the node: deleted 5h "
            f"ago outside the CRI (ctr, nerdctl or docker: cri-proxy saw no RemoveImage); see pinctl history {GONE}"
            ) in listed.stderr, listed.stderr
    assert KEPT not in listed.stderr

    one = pinctl(ctd, "ls", GONE, env=env)
    assert one.returncode == 1  # named, and not on the node
    assert f"pinctl: ls: no image matches {GONE}: deleted 5h ago outside the CRI" in one.stderr, one.stderr

    checked = pinctl(ctd, "check", "--runtime-endpoint", f"unix://{ctd.address}", "-o", "json", GONE, env=env)
    assert checked.returncode == 1, checked.stderr
    [item] = json.loads(checked.stdout)["images"]
    assert item["refs"] == [GONE] and item["cause"].startswith(
        "the runtime knows no image by this name: it was deleted 5h ago outside the CRI"), item
    assert f"pinctl history {GONE}" in item["fix"]

    # history reads files only: with containerd's socket pointing nowhere it answers all the same.
    nowhere = {**env, "CONTAINERD_ADDRESS": str(tmp_path / "no-such.sock"),
               "CONTAINER_RUNTIME_ENDPOINT": f"unix://{tmp_path / 'no-such.sock'}"}
    shown = pinctl(ctd, "history", GONE, env=nowhere)
    assert shown.returncode == 0, shown.stderr
    [header, row] = shown.stdout.splitlines()
    assert header.split() == ["TIME", "IMAGE", "WANTED", "PINNED", "DELETER", "WHY"]
    assert re.split(r" {3,}", row)[1:5] == [GONE, f"pattern {GONE}", "label", "outside the CRI"], row
    by_id = pinctl(ctd, "history", "-o", "json", image_id.split(":")[1][:12], env=nowhere)
    assert [entry["refs"] for entry in json.loads(by_id.stdout)["entries"]] == [[GONE, image_id]]
    missing = pinctl(ctd, "history", KEPT, env=nowhere)
    assert missing.returncode == 1 and f"no deletion of {KEPT}" in missing.stderr


def journal_deletion(journal: Path, runtime: str, namespace: str, refs: tuple[str, ...], image_id: str) -> None:
    """What sync --watch writes when an image the policy wants goes outside the CRI."""
    Journal(str(journal)).append(Deletion(
        time=time.time() - 3 * 3600 - 60, runtime=runtime, namespace=namespace, refs=refs, image_id=image_id,
        wanted=(f"pattern {refs[0]}",), deleter=DELETER_OUTSIDE_CRI, evidence="cri-proxy served and saw no RemoveImage"))


def test_docker_ls_points_at_a_short_name_docker_deleted(containerd17: ContainerdDaemon,
                                                         dockerd_classic: DockerDaemon, tmp_path: Path) -> None:
    """Docker names an image of the default registry by its short name (hist-tool:3): the
    policy's short name, ls's argument and the journal's line all meet on it."""
    docker = reset_docker(dockerd_classic)
    try:
        short = "hist-tool:3"
        load_images_docker(docker, tmp_path / "archives", [images.recipe(short, seed="hist-docker")])
        image_id = docker.inspect(short)["Id"]
        docker.docker("rmi", short)
        journal = tmp_path / "history"
        journal_deletion(journal, "docker", "", (short,), image_id)
        env = {"DOCKER_HOST": docker.host, "PINCTL_HISTORY_DIR": str(journal), "PINCTL_PINNED_IMAGES": short}
        listed = pinctl(containerd17, "ls", env=env)
        assert listed.returncode == 0, listed.stderr
        assert (f"pinctl: ls: {short}, wanted by the policy (env PINCTL_PINNED_IMAGES), is not on the node: deleted "
                f"3h ago outside the CRI") in listed.stderr, listed.stderr
        one = pinctl(containerd17, "ls", f"docker.io/library/{short}", env=env)
        assert f"no image matches docker.io/library/{short}: deleted 3h ago" in one.stderr, one.stderr
        shown = pinctl(containerd17, "history", "-q", "--history-dir", str(journal), "docker.io/library/hist-tool:3")
        assert shown.returncode == 0 and shown.stdout == f"{short}\n", shown.stderr
    finally:
        reset_docker(dockerd_classic)


def test_crio_ls_and_check_point_at_the_journal(crio: CrioDaemon, crio_crictl: Crictl, crio_registry: reg.Registry,
                                                tmp_path: Path) -> None:
    """On CRI-O (no containerd anywhere): crictl rmi straight to CRI-O, the journal's line, and
    ls and check naming it; check takes the short name as CRI-O's full one."""
    name = f"{DEFAULT_DOMAIN}/pinctl-test/hist-crio:1"
    crio_registry.push(tmp_path / "push", images.recipe(f"{crio_registry.host}/{registry_path(name)}", seed=name))
    pull(crio_crictl, [name])
    [image_id] = [image.id for image in crio_crictl.images() if name in image.repo_tags]
    crio_crictl.run("rmi", name)
    journal = tmp_path / "history"
    journal_deletion(journal, "cri-o", "", (name,), image_id)
    env = {key: value for key, value in os.environ.items()
           if key not in ("CONTAINERD_ADDRESS", "PINCTL_CONTAINERD_CONFIG", "DOCKER_HOST", "PINCTL_CONFIG")}
    env.update(CONTAINER_RUNTIME_ENDPOINT=crio.endpoint, PINCTL_HISTORY_DIR=str(journal), PINCTL_PINNED_IMAGES=name)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pinctl", *args], capture_output=True, text=True, env=env,
                              timeout=120)

    listed = run("ls")
    assert listed.returncode == 0, listed.stderr
    assert f"pinctl: ls: {name}, wanted by the policy (env PINCTL_PINNED_IMAGES), is not on the node: deleted 3h ago" \
        in listed.stderr, listed.stderr
    checked = run("check", "-o", "json", "pinctl-test/hist-crio:1")
    assert checked.returncode == 1, checked.stderr
    [item] = json.loads(checked.stdout)["images"]
    assert item["cause"].startswith("the runtime knows no image by this name: it was deleted 3h ago outside the CRI")
    assert f"pinctl history {name}" in item["fix"], item

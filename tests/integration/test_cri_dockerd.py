"""The seed user's node, for real: dockerd 26 with the containerd image store, cri-dockerd v0.4.3
in front of it, crictl as the kubelet's stand-in. A containerd pin label in moby does not reach
the kubelet through cri-dockerd; pinctl check says so and names the fix for that release; through
pinctl cri-proxy the labelled and the policy's images read pinned, and check agrees."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.harness import images
from tests.harness.containerd import ContainerdDaemon
from tests.harness.cri_dockerd import CriDockerd
from tests.harness.crictl import Crictl, by_tag
from tests.harness.docker import DockerDaemon
from tests.harness.engine_fixtures import LoadDocker
from tests.integration.pinctl_runner import pinctl
from tests.integration.test_criproxy import ProxyProcess, built_relay, proxy_factory

PIN = "io.cri-containerd.pinned"
LABELLED = "example.test/seed-labelled:1.0"
POLICY = "example.test/seed-policy:1.0"
PLAIN = "example.test/seed-plain:1.0"


@pytest.fixture
def seed(containerd17: ContainerdDaemon, dockerd_containerd_store: DockerDaemon, cri_dockerd_043: CriDockerd,
         docker_images: LoadDocker, tmp_path: pathlib.Path) -> Iterator[dict[str, str]]:
    """Images in Docker, one labelled with ctr -n moby as the seed user did, a policy naming another;
    the environment pinctl needs to read this node."""
    docker_images([images.recipe(LABELLED, seed="seed-l"), images.recipe(POLICY, seed="seed-p"),
                   images.recipe(PLAIN, seed="seed-x"),
                   images.recipe(cri_dockerd_043.sandbox_image, seed=images.SANDBOX_SEED)])
    moby_ref = next(img.ref for img in containerd17.images("moby") if img.ref.endswith("seed-labelled:1.0"))
    containerd17.ctr("images", "label", moby_ref, f"{PIN}=pinned", namespace="moby")
    config = tmp_path / "pinctl.toml"
    config.write_text(f'pinned_images = ["{POLICY}"]\n')
    yield {"DOCKER_HOST": dockerd_containerd_store.host, "PINCTL_CONFIG": str(config), "CONTAINERD_NAMESPACE": "moby"}


def crictl_images(crictl: pathlib.Path, endpoint: str, tmp_path: pathlib.Path) -> dict[str, Any]:
    return by_tag(Crictl(crictl, endpoint, tmp_path / f"crictl-{abs(hash(endpoint))}").images())


def check(ctd: ContainerdDaemon, endpoint: str, env: dict[str, str]) -> tuple[int, dict[str, Any], str]:
    result = pinctl(ctd, "check", "-n", "moby", "-r", endpoint, "-o", "json", env=env)
    return result.returncode, json.loads(result.stdout), result.stderr


def test_the_seed_label_does_not_reach_the_kubelet_and_check_names_the_fix(
        containerd17: ContainerdDaemon, cri_dockerd_043: CriDockerd, crictl: pathlib.Path, seed: dict[str, str],
        tmp_path: pathlib.Path) -> None:
    listed = crictl_images(crictl, cri_dockerd_043.endpoint, tmp_path)
    assert listed[LABELLED].pinned is False and listed[POLICY].pinned is False  # the seed user's report
    assert listed[cri_dockerd_043.sandbox_image].pinned is True
    code, doc, _ = check(containerd17, cri_dockerd_043.endpoint, seed)
    assert code == 1
    items = {item["refs"][0]: item for item in doc["images"]}
    for ref in (LABELLED, POLICY):
        cause, fix = items[ref]["cause"], items[ref]["fix"]
        assert "cri-dockerd 0.4.3 pins only its sandbox image" in cause, cause
        assert f"pinctl cri-proxy --listen /run/pinctl/cri-proxy.sock -r {cri_dockerd_043.endpoint}" in fix, fix
    # cri-dockerd's own pin of its sandbox image is understood, not an unexplained pin.
    sandbox = items[cri_dockerd_043.sandbox_image]
    assert sandbox["cause"] is None and "--pod-infra-container-image" in json.dumps(sandbox["reasons"])
    table = pinctl(containerd17, "check", "-n", "moby", "-r", cri_dockerd_043.endpoint, env=seed)
    assert table.returncode == 1 and "cri-dockerd 0.4.3" in table.stdout + table.stderr


@pytest.fixture(params=["relay", "python"])
def seed_proxies(request: pytest.FixtureRequest) -> Iterator[Callable[..., ProxyProcess]]:
    yield from proxy_factory(built_relay() if request.param == "relay" else "python")


def test_through_cri_proxy_the_seed_images_read_pinned_and_check_agrees(
        containerd17: ContainerdDaemon, cri_dockerd_043: CriDockerd, crictl: pathlib.Path, seed: dict[str, str],
        seed_proxies: Callable[..., ProxyProcess], tmp_path: pathlib.Path) -> None:
    proxy = seed_proxies(containerd17, upstream=cri_dockerd_043.address, env=seed)
    through = f"unix://{proxy.path}"
    direct = crictl_images(crictl, cri_dockerd_043.endpoint, tmp_path)
    proxied = crictl_images(crictl, through, tmp_path)
    assert proxied[LABELLED].pinned is True and proxied[POLICY].pinned is True
    assert proxied[PLAIN].pinned is False and proxied[cri_dockerd_043.sandbox_image].pinned is True
    for tag, image in direct.items():  # nothing else changes: IDs, names, sizes
        theirs = proxied[tag]
        assert (theirs.id, theirs.repo_tags, theirs.repo_digests, theirs.size) == (
            image.id, image.repo_tags, image.repo_digests, image.size)
    tool = Crictl(crictl, through, tmp_path / "crictl-inspect")
    assert tool.image_status(LABELLED)["status"]["pinned"] is True
    assert tool.image_status(PLAIN)["status"]["pinned"] is False
    code, doc, stderr = check(containerd17, through, seed)
    assert code == 0, (stderr, [i for i in doc["images"] if i["cause"]])


def test_ls_names_cri_dockerds_sandbox_image_and_shows_dockers_ids(
        containerd17: ContainerdDaemon, cri_dockerd_043: CriDockerd, crictl: pathlib.Path, seed: dict[str, str],
        tmp_path: pathlib.Path) -> None:
    doc = json.loads(pinctl(containerd17, "ls", "-n", "moby", "-o", "json", env=seed).stdout)
    rows = {img["ref"].rsplit("/", 1)[-1]: img for img in doc["images"]}
    sandbox = rows[cri_dockerd_043.sandbox_image.rsplit("/", 1)[-1]]
    assert sandbox["pinned"] and [r["kind"] for r in sandbox["reasons"]] == ["sandbox"]
    listed = crictl_images(crictl, cri_dockerd_043.endpoint, tmp_path)
    # The IDs the kubelet sees through cri-dockerd are the ones ls shows.
    assert rows["seed-labelled:1.0"]["id"] == listed[LABELLED].id
    assert rows["seed-labelled:1.0"]["id_kind"] == "docker"

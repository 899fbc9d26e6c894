"""prune of Docker's own images, through Docker's API (the containerd image store): a
container's image and one a configured Docker label names are kept, the spare one goes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import images
from tests.harness.containerd import ContainerdDaemon
from tests.harness.docker import DockerDaemon, expected_id, load_images_docker, reset_docker
from tests.integration.pinctl_runner import pinctl
from tests.integration.test_gc import by_action


@pytest.fixture
def docker(dockerd_containerd_store: DockerDaemon) -> Iterator[DockerDaemon]:
    dockerd_containerd_store.docker("container", "prune", "--force", check=False)
    yield reset_docker(dockerd_containerd_store)
    dockerd_containerd_store.docker("container", "prune", "--force", check=False)
    reset_docker(dockerd_containerd_store)


def test_prune_docker_images_through_dockers_api(containerd17: ContainerdDaemon, docker: DockerDaemon,
                                                 tmp_path: Path) -> None:
    spare, used, labelled = load_images_docker(docker, tmp_path / "archives", [
        images.recipe("example.test/gc-dk-spare:1", seed="gc-dk-spare"),
        images.recipe("example.test/gc-dk-used:1", seed="gc-dk-used"),
        images.recipe("example.test/gc-dk-keep:1", seed="gc-dk-keep", labels={"team.example/keep": "true"})])
    # The harness's images have no command; a created container needs one, never runs it.
    docker.docker("create", "--name", "gc-dk-user", images.familiar_ref(used.refs[0]), "/bin/sh")
    config = tmp_path / "config.toml"
    config.write_text('docker_pinned_image_labels = ["team.example/keep=true"]\n')
    args = ["prune", "-n", "moby", "--config", str(config), "--all-unused", "-o", "json"]
    env = {"DOCKER_HOST": docker.host}

    # Docker's build date (2024) is not when the image arrived: just loaded, it is too young.
    young = pinctl(containerd17, *args, "--dry-run", "--min-age", "1h", env=env)
    assert young.returncode == 0, young.stderr
    assert "would-remove" not in {item["action"] for item in json.loads(young.stdout)["results"]}

    result = pinctl(containerd17, *args, "--yes", "--min-age", "0s", env=env)
    assert result.returncode == 0, result.stderr
    actions = by_action(json.loads(result.stdout))
    ids = {info.refs[0]: expected_id(docker, info) for info in (spare, used, labelled)}
    assert set(actions["removed"]) == {ids[spare.refs[0]]}
    assert actions["kept"][ids[used.refs[0]]]["why"].startswith("in use by gc-dk-user")
    assert "Docker label team.example/keep=true" in actions["kept"][ids[labelled.refs[0]]]["why"]
    assert {item["runtime"] for item in json.loads(result.stdout)["results"]} == {f"Docker at {docker.host}"}
    assert set(docker.image_ids()) == {ids[used.refs[0]], ids[labelled.refs[0]]}

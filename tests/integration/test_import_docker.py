"""pinctl import -n moby against dockerd 26 with its containerd image store (on the harness's
containerd 1.7): archives of both formats loaded through Docker's API after pinctl read them
whole, each reference pinned in moby; a broken archive never reaches Docker; and through
cri-dockerd v0.4.3, which reads no label, crictl sees the imported image pinned only through
pinctl cri-proxy."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.harness import archives, images
from tests.harness.containerd import ContainerdDaemon
from tests.harness.cri_dockerd import CriDockerd
from tests.harness.crictl import Crictl, by_tag
from tests.harness.docker import DockerDaemon, reset_docker
from tests.integration.pinctl_runner import pinctl
from tests.integration.test_criproxy import ProxyProcess, built_relay, proxy_factory

PIN = "io.cri-containerd.pinned"


@pytest.fixture
def docker(dockerd_containerd_store: DockerDaemon) -> Iterator[DockerDaemon]:
    yield reset_docker(dockerd_containerd_store)
    reset_docker(dockerd_containerd_store)


def import_moby(ctd: ContainerdDaemon, docker: DockerDaemon, *args: str) -> Any:
    return pinctl(ctd, "import", "-n", "moby", "--max-usage", "95", *args, env={"DOCKER_HOST": docker.host})


def moby_labels(ctd: ContainerdDaemon) -> dict[str, dict[str, str]]:
    return {row.ref: row.labels for row in ctd.images("moby")}


@pytest.mark.parametrize("fmt", ["oci", "docker"])
def test_import_into_docker_pins_each_reference_in_moby(containerd17: ContainerdDaemon, docker: DockerDaemon,
                                                        tmp_path: pathlib.Path, fmt: str) -> None:
    path = tmp_path / f"{fmt}.tar"
    make = archives.oci_archive if fmt == "oci" else archives.docker_archive
    (info,) = make(path, [images.recipe(f"example.test/dimp-{fmt}:1", seed=f"dimp-{fmt}")], "gzip")
    result = import_moby(containerd17, docker, "--pin", str(path), "-o", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert document["runtime"].startswith("Docker at ")
    assert [(i["ref"], i["action"], i["pin"], i["namespace"]) for i in document["imports"]] == [
        (info.refs[0], "imported", "pinned", "moby")]
    assert docker.docker("image", "inspect", info.refs[0], check=False).returncode == 0
    assert moby_labels(containerd17)[info.refs[0]].get(PIN) == "pinned"
    again = json.loads(import_moby(containerd17, docker, "--pin", str(path), "-o", "json").stdout)
    assert [(i["action"], i["pin"]) for i in again["imports"]] == [("present", "already-pinned")]


def test_a_broken_archive_never_reaches_docker(containerd17: ContainerdDaemon, docker: DockerDaemon) -> None:
    before = docker.docker("images", "-q").stdout
    result = import_moby(containerd17, docker, "--pin", str(archives.CORPUS / "docker-diffid.tar"))
    assert result.returncode == 1 and "does not match layer 0's diff_id" in result.stderr
    assert docker.docker("images", "-q").stdout == before


@pytest.fixture
def relay_proxies() -> Iterator[Callable[..., ProxyProcess]]:
    yield from proxy_factory(built_relay())


def test_through_cri_dockerd_the_import_reads_pinned_only_through_cri_proxy(
        containerd17: ContainerdDaemon, cri_dockerd_043: CriDockerd, crictl: pathlib.Path, docker: DockerDaemon,
        relay_proxies: Callable[..., ProxyProcess], tmp_path: pathlib.Path) -> None:
    # The docker fixture empties the dockerd cri-dockerd fronts, before and after: pinned images
    # left in moby would show in other tests' listings.
    assert docker is cri_dockerd_043.docker
    path = tmp_path / "side.tar"
    (info,) = archives.docker_archive(path, [images.recipe("example.test/side-loaded:1.0", seed="side-loaded")])
    result = import_moby(containerd17, docker, "--pin", str(path))
    assert result.returncode == 0, result.stderr
    familiar = images.familiar_ref(info.refs[0])
    direct = by_tag(Crictl(crictl, cri_dockerd_043.endpoint, tmp_path / "crictl-direct").images())
    assert direct[familiar].pinned is False  # cri-dockerd 0.4.3 reads no containerd label
    env = {"DOCKER_HOST": docker.host, "CONTAINERD_NAMESPACE": "moby"}
    proxy = relay_proxies(containerd17, upstream=cri_dockerd_043.address, env=env)
    proxied = by_tag(Crictl(crictl, f"unix://{proxy.path}", tmp_path / "crictl-proxy").images())
    assert proxied[familiar].pinned is True

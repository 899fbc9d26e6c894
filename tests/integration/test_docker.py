"""Docker as a source, against real dockerd 26: the containerd image store (on the harness's
containerd 1.7) and the classic store, checked with docker itself and with ctr -n moby."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import images
from tests.harness.containerd import ContainerdDaemon
from tests.harness.docker import DockerDaemon, expected_id, load_images_docker, reset_docker
from tests.integration.pinctl_runner import assert_one_line_error, pinctl

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PIN = "io.cri-containerd.pinned"
APP = ("example.test/dk-app:1", "example.test/dk-app:2")


@pytest.fixture
def store_docker(dockerd_containerd_store: DockerDaemon) -> Iterator[DockerDaemon]:
    yield reset_docker(dockerd_containerd_store)
    reset_docker(dockerd_containerd_store)


@pytest.fixture
def classic_docker(dockerd_classic: DockerDaemon) -> Iterator[DockerDaemon]:
    yield reset_docker(dockerd_classic)
    reset_docker(dockerd_classic)


def run(ctd: ContainerdDaemon, docker: DockerDaemon, *args: str, env: dict[str, str] | None = None) -> Any:
    return pinctl(ctd, *args, env={"DOCKER_HOST": docker.host, **(env or {})})


def run_json(ctd: ContainerdDaemon, docker: DockerDaemon, *args: str, expect: int = 0, env: dict[str, str] | None = None) -> Any:
    result = run(ctd, docker, *args, "-o", "json", env=env)
    assert result.returncode == expect, result.stderr
    return json.loads(result.stdout)


def moby_labels(ctd: ContainerdDaemon) -> dict[str, dict[str, str]]:
    return {row.ref: row.labels for row in ctd.images("moby")}


def load(docker: DockerDaemon, tmp_path: Path, *recipes: images.ImageRecipe) -> list[images.ImageInfo]:
    return load_images_docker(docker, tmp_path / "archives", recipes)


def test_containerd_store_images_show_once(containerd17: ContainerdDaemon, store_docker: DockerDaemon, tmp_path: Path) -> None:
    (app,) = load(store_docker, tmp_path, images.recipe(*APP, seed="dk", labels={"team.example/keep": "true"}))
    doc = run_json(containerd17, store_docker, "ls", "-n", "moby")
    rows = [img for img in doc["images"] if img["ref"] in APP]
    assert sorted(img["ref"] for img in rows) == sorted(APP)
    docker_id = store_docker.inspect(APP[0])["Id"]
    assert docker_id == expected_id(store_docker, app) != app.image_id  # the target's digest, not the config's
    for img in rows:
        assert img["source"] == "docker" and img["namespace"] == "moby"
        # The ID docker images shows, and which ID it is; the config digest stays beside it.
        assert (img["id"], img["id_kind"], img["config_digest"]) == (docker_id, "docker", app.image_id)
        assert img["config_labels"] == {"team.example/keep": "true"}
    assert len({img["ref"] for img in doc["images"]}) == len(doc["images"])
    table = run(containerd17, store_docker, "ls", "-n", "moby", "-o", "wide")
    assert docker_id in table.stdout and app.image_id not in table.stdout


@pytest.mark.parametrize("which", ["docker", "config"])
def test_either_id_selects_a_docker_image(containerd17: ContainerdDaemon, store_docker: DockerDaemon, tmp_path: Path,
                                          which: str) -> None:
    (app,) = load(store_docker, tmp_path, images.recipe(*APP, seed="dk-id"))
    image_id = store_docker.inspect(APP[0])["Id"] if which == "docker" else app.image_id
    doc = run_json(containerd17, store_docker, "pin", "-n", "moby", image_id.split(":")[1][:12])
    assert {r["ref"] for r in doc["results"] if r["action"] == "pinned"} == set(APP)
    assert all(moby_labels(containerd17)[ref][PIN] == "pinned" for ref in APP)
    run_json(containerd17, store_docker, "unpin", "-n", "moby", image_id)
    assert not any(PIN in moby_labels(containerd17)[ref] for ref in APP)


def test_pin_and_unpin_through_moby(containerd17: ContainerdDaemon, store_docker: DockerDaemon, tmp_path: Path) -> None:
    (app,) = load(store_docker, tmp_path, images.recipe(*APP, seed="dk"))
    doc = run_json(containerd17, store_docker, "pin", APP[0], APP[1])
    assert {(r["namespace"], r["ref"], r["action"]) for r in doc["results"]} == {
        ("moby", APP[0], "pinned"), ("moby", APP[1], "pinned")}
    assert moby_labels(containerd17)[APP[0]][PIN] == "pinned"
    # Docker goes on working with the labelled image.
    assert store_docker.inspect(APP[0])["Id"] == expected_id(store_docker, app)
    store_docker.docker("tag", APP[0], "example.test/dk-app:3")
    store_docker.docker("rmi", APP[1])
    labels = moby_labels(containerd17)
    assert labels[APP[0]][PIN] == "pinned" and APP[1] not in labels
    store_docker.docker("tag", APP[0], APP[1])  # re-tag: Docker copies the record's labels, the pin too
    assert moby_labels(containerd17)[APP[1]][PIN] == "pinned"
    rows = {img["ref"]: img for img in run_json(containerd17, store_docker, "ls", "-n", "moby")["images"]}
    assert rows["example.test/dk-app:3"]["pinned"] and rows[APP[1]]["pinned"]
    doc = run_json(containerd17, store_docker, "unpin", APP[0])
    assert not [ref for ref, found in moby_labels(containerd17).items() if PIN in found and "dk-app" in ref]


def test_classic_store_lists_but_cannot_pin(containerd17: ContainerdDaemon, classic_docker: DockerDaemon, tmp_path: Path) -> None:
    (app,) = load(classic_docker, tmp_path, images.recipe(*APP, seed="dk"))
    doc = run_json(containerd17, classic_docker, "ls", "--pinned-image", "example.test/dk-app:*")
    rows = {img["ref"]: img for img in doc["images"] if img["source"] == "docker"}
    assert set(rows) == set(APP)
    assert rows[APP[0]]["namespace"] is None and rows[APP[0]]["id"] == app.image_id  # the classic store's ID
    assert rows[APP[0]]["id_kind"] == "docker" and rows[APP[0]]["config_digest"] == app.image_id
    assert rows[APP[0]]["reasons"] == [{"kind": "pattern", "detail": "example.test/dk-app:*", "source": "flag --pinned-image"}]
    result = run(containerd17, classic_docker, "pin", APP[0])
    assert result.returncode == 1
    [line] = [l for l in result.stderr.splitlines() if APP[0] in l]
    assert "classic store (vfs)" in line and "containerd image store" in line and "docker_pinned_image_labels" in line
    assert "Traceback" not in result.stderr


def test_config_labels_pin_like_cri_dockerd(containerd17: ContainerdDaemon, classic_docker: DockerDaemon, tmp_path: Path) -> None:
    load(classic_docker, tmp_path,
         images.recipe("example.test/dk-keep:1", seed="k", labels={"team.example/keep": "true"}),
         images.recipe("example.test/dk-other:1", seed="o", labels={"team.example/keep": "no"}))
    config = tmp_path / "config.toml"
    config.write_text('docker_pinned_image_labels = ["team.example/keep=true"]\n')
    doc = run_json(containerd17, classic_docker, "ls", "--config", str(config))
    rows = {img["ref"]: img for img in doc["images"]}
    assert rows["example.test/dk-keep:1"]["pinned"] is True
    assert rows["example.test/dk-keep:1"]["reasons"] == [{"kind": "docker-label", "detail": "team.example/keep=true"}]
    assert rows["example.test/dk-other:1"]["pinned"] is False
    assert "docker label team.example/keep=true" in run(containerd17, classic_docker, "ls", "--config", str(config)).stdout


def test_export_parses_back(containerd17: ContainerdDaemon, classic_docker: DockerDaemon, tmp_path: Path,
                            clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon]) -> None:
    clean_k8s_io(containerd17)  # export expands patterns over every image present, k8s.io's too
    load(classic_docker, tmp_path, images.recipe("example.test/dk-fedora-tools:1", seed="f"), images.recipe(APP[0], seed="a"))
    config = tmp_path / "config.toml"
    config.write_text('pinned_images = ["example.test/dk-app:*", "*fedora*"]\ndocker_pinned_image_labels = ["keep"]\n')
    out = {t: run(containerd17, classic_docker, "config", "export", "--for", t, "--config", str(config)) for t in
           ("crio", "cri-dockerd")}
    assert all(r.returncode == 0 for r in out.values()), {t: r.stderr for t, r in out.items()}
    assert tomllib.loads(out["crio"].stdout)["crio"]["image"]["pinned_images"] == ["example.test/dk-app:*", "*fedora*"]
    # containerd 1.7 has no pinned_images: no table for it (test_containerd_pinned_images has 2.1's).
    refused = run(containerd17, classic_docker, "config", "export", "--for", "containerd", "--config", str(config))
    assert refused.returncode == 2 and refused.stdout == "" and "has no pinned_images" in refused.stderr
    assert shlex.split(out["cri-dockerd"].stdout) == [
        "--pinned-images=example.test/dk-app:*,example.test/dk-fedora-tools:1", "--pinned-image-labels=keep"]


def test_named_docker_host_that_is_down(containerd17: ContainerdDaemon, tmp_path: Path) -> None:
    result = pinctl(containerd17, "ls", "--docker-host", f"unix://{tmp_path}/none.sock")
    assert_one_line_error(result, 1, "Docker socket", "none.sock", "--docker-host")


def test_ls_reads_docker_without_its_sdk(containerd17: ContainerdDaemon, classic_docker: DockerDaemon, tmp_path: Path) -> None:
    """ls, ls -q and their rows come from dockerd's API read with the standard library: the docker
    SDK (requests, urllib3) is never imported, and the names are docker images' own."""
    load(classic_docker, tmp_path, images.recipe(*APP, seed="dk-wire"), images.recipe("example.test/dk-solo:1", seed="s"))
    docker_names = {f"{img['Repository']}:{img['Tag']}" for img in classic_docker.images()}
    for args in (("ls", "-n", "moby", "-o", "json"), ("ls", "-n", "moby", "-q")):
        result = run(containerd17, classic_docker, *args, env={"PYTHONPROFILEIMPORTTIME": "1"})
        assert result.returncode == 0, result.stderr
        imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
        assert "pinctl.backends.docker" in imported  # the measure sees what it should
        assert not {"docker", "requests", "urllib3"} & imported
        listed = ({img["ref"] for img in json.loads(result.stdout)["images"] if img["source"] == "docker"}
                  if "json" in args else set(result.stdout.split()))
        assert listed == docker_names


def test_engine_calls_against_dockerd(classic_docker: DockerDaemon, tmp_path: Path) -> None:
    from pinctl.backends.docker import DockerEngine
    from pinctl.errors import EngineError

    (app,) = load(classic_docker, tmp_path, images.recipe(APP[0], seed="dk-calls", labels={"team.example/keep": "true"}))
    engine = DockerEngine(classic_docker.host, 10.0)
    try:
        assert engine.image_store().containerd is False and engine.image_store().driver == "vfs"
        assert engine.image_present(APP[0]) == app.image_id
        assert engine.image_present("example.test/dk-none:1") is None and engine.image("example.test/dk-none:1") is None
        found = engine.image(app.image_id)
        assert found is not None and found.repo_tags == (APP[0],) and found.labels == {"team.example/keep": "true"}
        assert [(i.image_id, i.repo_tags) for i in engine.list_images()] == [(app.image_id, (APP[0],))]
        assert engine.root_dir() == classic_docker.info()["DockerRootDir"]
        assert engine.list_containers() == []
        with pytest.raises(EngineError) as refused:
            engine.remove_image("sha256:" + "0" * 64)
        assert "No such image" in refused.value.message and "(HTTP 404)" in refused.value.message
        engine.remove_image(app.image_id)
        assert engine.image_present(APP[0]) is None and classic_docker.images() == []
    finally:
        engine.close()


def test_a_docker_host_that_never_answers(containerd17: ContainerdDaemon, mute_socket: Path) -> None:
    result = pinctl(containerd17, "ls", "--docker-host", f"unix://{mute_socket}", "--timeout", "0.5")
    assert_one_line_error(result, 1, f"Docker at unix://{mute_socket} did not answer within 0.5s", "--timeout")

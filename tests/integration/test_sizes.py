"""SIZE in `pinctl ls` is never a wrong figure (issue 32): in k8s.io of containerd 1.7 and 2.1 it is
the CRI's ListImages figure, the one the kubelet's GC counts, and the same as ctr's SIZE column;
in Docker's moby namespace it is the content's, as ctr shows it (Docker's own figure adds the
unpacked layers, and costs its image list). Checked after pulls through the CRI, imports, a tag
re-pointed by a pull and by an import, and deletions, each time with the target cache emptied
first and then warm from the run before (the warm run must not carry a figure the node no longer
has). Read back independently: the CRI's ListImages, ctr images ls, Docker's API.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import engine_unavailable
from tests.harness import cri, images
from tests.harness import registry as reg
from tests.harness.containerd import ContainerdDaemon
from tests.harness.docker import DockerDaemon, load_images_docker, reset_docker
from tests.integration.pinctl_runner import pinctl
from tests.integration.test_pull import registry  # noqa: F401 - a fixture: docker-registry on loopback

pytestmark = pytest.mark.integration

UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def as_ctr_shows(size: int) -> str:
    """A byte count as ctr images ls writes it (containerd's progress.Bytes: base 1024, one decimal)."""
    value, unit = float(size), 0
    while value >= 1024 and unit < len(UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{value:.1f} {UNITS[unit]}"


@pytest.fixture(scope="module", params=["containerd-1.7", "containerd-2.1", "containerd-2.4"], ids=["ctd17", "ctd21", "ctd24"])
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         registry: reg.Registry) -> Iterator[reg.RegistryContainerd]:
    engine: str = request.param
    daemon = reg.RegistryContainerd(engine, tmp_path_factory.mktemp("sizes-node"))
    daemon.add_host(registry.host)
    try:
        daemon.start()
    except Exception as exc:  # noqa: BLE001 - an engine that cannot start skips (fails in CI)
        engine_unavailable(f"{engine} unavailable: {exc}")
    yield daemon
    daemon.stop()


def listed_rows(daemon: ContainerdDaemon, cache: pathlib.Path, namespace: str, cold: bool,
                env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    if cold:
        shutil.rmtree(cache, ignore_errors=True)
    done = pinctl(daemon, "ls", "-n", namespace, "-o", "json", env={"PINCTL_CACHE_DIR": str(cache), **(env or {})})
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["errors"] == [], document["errors"]
    return [row for row in document["images"] if row["namespace"] == namespace]


def cri_settled(daemon: ContainerdDaemon) -> dict[str, int]:
    """The CRI's size by image ID, once the CRI has taken in every record change (it follows
    containerd's events): every name it lists is a record, and every record is listed."""
    def agrees(listed: list[cri.CriImage]) -> bool:
        records = {image.ref for image in daemon.images("k8s.io")}
        named = {name for image in listed for name in (*image.repo_tags, *image.repo_digests)}
        ids = {image.id for image in listed}
        return named == {r for r in records if not r.startswith("sha256:")} and \
            {r for r in records if r.startswith("sha256:")} <= ids
    return {image.id: image.size for image in cri.wait_for(daemon.address, agrees)}


def assert_sizes_agree(daemon: ContainerdDaemon, cache: pathlib.Path, step: str) -> None:
    sizes = cri_settled(daemon)
    ctr = {image.ref: image.size for image in daemon.images("k8s.io")}
    for cold in (True, False):
        rows = listed_rows(daemon, cache, "k8s.io", cold)
        where = f"{step}, target cache {'empty' if cold else 'warm'}"
        assert sorted(row["ref"] for row in rows) == sorted(ctr), where
        wrong = [(row["ref"], row["size"], sizes.get(row["id"]), ctr[row["ref"]]) for row in rows
                 if row["size"] != sizes.get(row["id"]) or as_ctr_shows(row["size"]) != ctr[row["ref"]]]
        assert wrong == [], f"{where}: (ref, pinctl, CRI, ctr) {wrong}"


def push(registry: reg.Registry, tmp_path: pathlib.Path, name: str, seed: str, **kw: Any) -> str:
    ref = f"{registry.host}/pinctl/{name}"
    registry.push(tmp_path / "push", images.recipe(ref, seed=seed, **kw))
    return ref


def pull(daemon: ContainerdDaemon, *refs: str) -> None:
    done = pinctl(daemon, "pull", "-r", daemon.address, "-n", "k8s.io", *refs)
    assert done.returncode == 0, done.stderr


def test_k8s_io_sizes_are_the_cri_s_and_ctr_s_through_a_node_s_changes(
        node: reg.RegistryContainerd, registry: reg.Registry, tmp_path: pathlib.Path) -> None:
    node.clear_images("k8s.io")
    cache = tmp_path / "cache"
    app = push(registry, tmp_path, "sizes-app:1", "sizes-app-1", layer_bytes=3000)
    many = push(registry, tmp_path, "sizes-many:1", "sizes-many", platforms=("linux/amd64", "linux/arm64"),
                layer_bytes=5000)
    pull(node, app, many)
    images.load_images(node, tmp_path, [
        images.recipe("example.test/sizes/imported:1", seed="sizes-imp-1", layer_bytes=7000, force_index=True),
        images.recipe("example.test/sizes/plain:1", seed="sizes-plain", layer_bytes=100, compress=False)])
    assert_sizes_agree(node, cache, "after pulls and imports")

    # Re-pointed: app:1 by a pull of a new push, imported:1 by a new import. The old images keep
    # their digest and ID records, so each stays listed beside its successor.
    push(registry, tmp_path, "sizes-app:1", "sizes-app-2", layer_bytes=9000)
    pull(node, app)
    images.load_images(node, tmp_path, [
        images.recipe("example.test/sizes/imported:1", seed="sizes-imp-2", layer_bytes=1200)])
    assert_sizes_agree(node, cache, "after re-pointed tags")
    warm = listed_rows(node, cache, "k8s.io", cold=False)
    assert len({row["id"] for row in warm if row["ref"].endswith("/sizes-app:1")}) == 1

    # Deleted: every name of the multi-platform image, and the re-pointed import's tag.
    many_id = next(row["id"] for row in warm if row["ref"] == many)
    doomed = sorted({row["ref"] for row in warm if row["id"] == many_id} | {"example.test/sizes/imported:1"})
    node.ctr("images", "rm", *doomed)
    assert_sizes_agree(node, cache, "after deletions")


@pytest.fixture
def store_docker(dockerd_containerd_store: DockerDaemon) -> Iterator[DockerDaemon]:
    yield reset_docker(dockerd_containerd_store)
    reset_docker(dockerd_containerd_store)


def docker_list_sizes(daemon: DockerDaemon) -> dict[str, int]:
    """Size by image ID from Docker's image list (GET /images/json): the figure `docker images`
    shows and cri-dockerd's ListImages passes to the kubelet; with the containerd image store it
    adds the unpacked layers to the content."""
    import docker

    client = docker.APIClient(base_url=daemon.host, version="auto")
    try:
        return {str(image["Id"]): int(image["Size"]) for image in client.images()}
    finally:
        client.close()


def test_moby_sizes_are_the_content_s_as_ctr_shows_them(containerd17: ContainerdDaemon, store_docker: DockerDaemon,
                                                         tmp_path: pathlib.Path) -> None:
    """Docker's own figure costs its image list, seconds per thousand images with the containerd
    image store, so `ls` shows the content's, as `ctr -n moby images ls` does; gc plan takes
    Docker's (the kubelet's through cri-dockerd), and the two differ by the unpacked layers."""
    cache = tmp_path / "cache"
    env = {"DOCKER_HOST": store_docker.host}

    def agree(step: str) -> None:
        ctr = {image.ref: image.size for image in containerd17.images("moby")}
        docker = docker_list_sizes(store_docker)
        for cold in (True, False):
            rows = listed_rows(containerd17, cache, "moby", cold, env)
            where = f"{step}, cache {'empty' if cold else 'warm'}"
            assert sorted(row["ref"] for row in rows) == sorted(ctr), where
            wrong = [(row["ref"], row["size"], ctr[row["ref"]]) for row in rows if as_ctr_shows(row["size"]) != ctr[row["ref"]]]
            assert wrong == [], f"{where}: (ref, pinctl, ctr) {wrong}"
            assert all(row["size"] < docker[row["id"]] for row in rows), (where, rows, docker)

    load_images_docker(store_docker, tmp_path / "a", [
        images.recipe("example.test/sizes-dk/one:1", seed="sizes-dk-1", layer_bytes=4000),
        images.recipe("example.test/sizes-dk/two:1", "example.test/sizes-dk/two:2", seed="sizes-dk-2",
                      platforms=("linux/amd64", "linux/arm64"), layer_bytes=800)])
    agree("after loads")
    load_images_docker(store_docker, tmp_path / "b", [
        images.recipe("example.test/sizes-dk/one:1", seed="sizes-dk-1b", layer_bytes=6000)])
    agree("after a re-pointed tag")
    store_docker.docker("rmi", "example.test/sizes-dk/two:1", "example.test/sizes-dk/two:2")
    agree("after a deletion")


def scraped_image_bytes(port: int) -> dict[str, float]:
    """pinctl_images_size_bytes for k8s.io by pinned, once the watcher has read the node."""
    from prometheus_client.parser import text_string_to_metric_families

    from tests.integration.test_metrics import WAIT, http_get

    deadline = time.monotonic() + WAIT
    while True:
        code, text = http_get(f"http://127.0.0.1:{port}/metrics")
        found = {s.labels["pinned"]: s.value for family in text_string_to_metric_families(text) if code == 200
                 for s in family.samples if s.name == "pinctl_images_size_bytes" and s.labels.get("namespace") == "k8s.io"}
        if found:
            return found
        assert time.monotonic() < deadline, text
        time.sleep(0.2)


def test_one_image_two_targets_shows_the_cri_s_one_figure_in_ls_check_and_the_watcher(
        node: reg.RegistryContainerd, tmp_path: pathlib.Path) -> None:
    """The CRI keeps one size per image ID, taken from the first record it read: an index, then
    the same image imported as its platform's manifest alone, is one figure (the index's) to the
    CRI and two to ctr. pinctl shows the CRI's on both rows, and its textfile and metrics count it."""
    from tests.integration.test_metrics import free_port
    from tests.integration.test_watch import WatchProcess

    node.clear_images("k8s.io")
    (indexed,) = images.load_images(node, tmp_path / "a", [
        images.recipe("example.test/sizes/both:index", seed="sizes-two-targets", layer_bytes=2000, force_index=True)])
    (single,) = images.load_images(node, tmp_path / "b", [
        images.recipe("example.test/sizes/both:manifest", seed="sizes-two-targets", layer_bytes=2000)])
    assert indexed.image_id == single.image_id and indexed.digest != single.digest
    sizes = cri_settled(node)
    ctr = {image.ref: image.size for image in node.images("k8s.io")}
    rows = {row["ref"]: row for row in listed_rows(node, tmp_path / "cache", "k8s.io", cold=True)}
    both = ("example.test/sizes/both:index", "example.test/sizes/both:manifest")
    assert {rows[ref]["size"] for ref in both} == {sizes[indexed.image_id]}
    assert ctr[both[0]] == as_ctr_shows(sizes[indexed.image_id]) != ctr[both[1]], (ctr, sizes)

    textfile = tmp_path / "check.prom"
    done = pinctl(node, "check", "-r", node.address, "-n", "k8s.io", "--textfile", str(textfile))
    assert done.returncode in (0, 1), done.stderr
    line = next(line for line in textfile.read_text().splitlines()
                if line.startswith('pinctl_images_size_bytes{namespace="k8s.io",pinned="false"}'))
    assert float(line.split()[-1]) == sum(sizes.values())

    port = free_port()
    config = tmp_path / "watch.toml"
    config.write_text("pinned_images = []\n")
    watcher = WatchProcess(node, config, "-n", "k8s.io", "--metrics-address", f"127.0.0.1:{port}",
                           "--check-interval", "1", env={"CONTAINER_RUNTIME_ENDPOINT": f"unix://{node.address}"})
    try:
        watcher.wait_log("full sync")
        assert scraped_image_bytes(port).get("false") == sum(sizes.values())
    finally:
        watcher.proc.kill()
        watcher.proc.wait()

"""The runtime's sandbox (pause) image, runtime by runtime, for real: when each one pins it, and
that ls, ls --cri, check, gc plan, prune and unpin then tell the same story (pins/sandbox.py
has the rules; docs/sandbox-image.md's table says what these show).

- containerd 1.7, the sandbox image pulled by its CRI (from a registry on loopback): labelled and
  pinned; unpinned, it stays so (the GC may delete it) until its CRI pulls it again;
- containerd 1.7, imported by hand: the CRI labels a record it takes in under that name, but not
  one made already as the CRI's (``ctr images tag`` of an image it manages): that one is not pinned;
- containerd 2.1: labels it by its pinned_images.sandbox whatever came before, at once after an unpin;
- cri-dockerd 0.4.3: pins it by its Docker name, labels or not;
- pinctl cri-proxy in front of containerd 1.7: reports it pinned when containerd does not.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Optional

import pytest

from tests.conftest import engine_unavailable, reset_k8s_io
from tests.harness import cri, cri_pods, images
from tests.harness import registry as reg
from tests.harness.containerd import ContainerdDaemon
from tests.harness.cri_dockerd import CriDockerd
from tests.harness.docker import DockerDaemon
from tests.harness.engine_fixtures import LoadDocker
from tests.integration.pinctl_runner import pinctl
from tests.integration.test_criproxy import ProxyProcess, proxy_factory

PIN = "io.cri-containerd.pinned"
MIRRORED = "example.test/mirror/pause:3.9"  # where an air-gapped node's pause image often comes from
LoadImages = Callable[..., list[images.ImageInfo]]


@dataclass(frozen=True)
class Story:
    """What each command says of the sandbox image: PINNED in ls (the runtime's own pin), what
    the CRI at the endpoint tells the kubelet, check's cause (None: it agrees), gc plan's and a
    dry-run prune's verdict, each in a word or two."""

    ls_pinned: bool
    cri_pinned: bool
    check_cause: Optional[str]
    gc: str
    prune: str


def run_json(daemon: ContainerdDaemon, *args: str, env: Optional[dict[str, str]] = None,
             expect: tuple[int, ...] = (0,)) -> Any:
    result = pinctl(daemon, *args, "-o", "json", env=env)
    assert result.returncode in expect, (args, result.returncode, result.stderr)
    return json.loads(result.stdout)


def story(daemon: ContainerdDaemon, sandbox: str, endpoint: str, *, namespace: str = "k8s.io",
          env: Optional[dict[str, str]] = None) -> Story:
    """Every command's verdict on the image named sandbox, through the CRI at endpoint."""
    common = ("-n", namespace, "-r", endpoint)
    [row] = [r for r in run_json(daemon, "ls", "--cri", *common, env=env)["images"] if r["ref"] == sandbox]
    checked = run_json(daemon, "check", *common, env=env, expect=(0, 1))
    [item] = [i for i in checked["images"] if sandbox in i["refs"]]
    gc = run_json(daemon, "gc", "plan", *common, "--usage", "99", "--min-age", "0s", env=env, expect=(0, 1))["gc"]
    image_id = item["id"]
    protected = {p["id"]: p["reasons"] for p in gc["protected"]}
    at_risk = {r["id"]: r for r in gc["at_risk"]}
    if image_id in protected:
        verdict = "protected: " + ", ".join(protected[image_id])
        assert image_id not in {e["id"] for e in gc["order"]}
    else:
        [entry] = [e for e in gc["order"] if e["id"] == image_id]
        verdict = entry["fate"] + (f", at risk: {at_risk[image_id]['wanted_because']}" if image_id in at_risk else "")
    pruned = run_json(daemon, "prune", "--dry-run", "--all-unused", "--min-age", "0s", *common, env=env)["results"]
    [kept] = [r for r in pruned if r["id"] == image_id]
    cause = item["cause"] and f"{item['cause']} | fix: {item['fix']}"
    why = kept["why"] or ""
    prune = kept["action"] + "".join(f"; {part}" for part in ("the sandbox image", "pinned by the runtime") if part in why)
    return Story(row["pinned"], row["cri_pinned"], cause, verdict, prune)


def unpinned_story(rule: str, sandbox: str) -> Story:
    """containerd's sandbox image without its label: not pinned, and every command says so."""
    return Story(False, False, f"the CRI sandbox image, unpinned: {rule} | fix: pinctl pin {sandbox}",
                 "deleted_space, at risk: the sandbox image", "kept; the sandbox image")


PINNED_STORY = Story(True, True, None, "protected: pinned", "kept; the sandbox image; pinned by the runtime")


def containerd_version(daemon: ContainerdDaemon) -> str:
    """The version containerd gives pinctl (its Version call: Debian's has its ~ds1 suffix)."""
    return str(run_json(daemon, "check", "-r", f"unix://{daemon.address}", expect=(0, 1))["runtime"]["version"])


def wait_cri_pinned(address: str, ref: str, pinned: bool) -> None:
    """The CRI sees a label change within moments (its image events): wait for it, not for a time."""
    cri.wait_for(address, lambda listed: any(ref in i.repo_tags and i.pinned is pinned for i in listed), 30)


def unpin(daemon: ContainerdDaemon, ref: str, env: Optional[dict[str, str]] = None,
          namespace: str = "k8s.io") -> tuple[dict[str, Any], str]:
    result = pinctl(daemon, "unpin", "-n", namespace, ref, "-o", "json", env=env)
    assert result.returncode == 0, result.stderr
    [item] = [i for i in json.loads(result.stdout)["results"] if i["ref"] == ref]
    return item, result.stderr


# --- containerd 1.7: its CRI pulls the sandbox image ---------------------------------------------


@pytest.fixture(scope="module")
def pulling_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[reg.RegistryContainerd, str]]:
    """containerd 1.7 whose sandbox_image is served by a registry on loopback, so its CRI pulls
    it as on a connected node (PullImage, as RunPodSandbox does when it is absent)."""
    why = reg.available()
    if why:
        engine_unavailable(why)
    base = tmp_path_factory.mktemp("sandbox-pull")
    registry = reg.Registry(base / "registry").start()
    sandbox = f"{registry.host}/pinctl/pause:3.9"
    registry.push(base / "push", images.recipe(sandbox, seed=images.SANDBOX_SEED, compress=False))
    daemon = reg.RegistryContainerd("containerd-1.7", base / "daemon", sandbox_image=sandbox)
    daemon.add_host(registry.host)
    try:
        daemon.start()
    except Exception as exc:  # noqa: BLE001 - an engine that cannot start skips (fails in CI)
        registry.stop()
        engine_unavailable(f"containerd-1.7 unavailable: {exc}")
    yield daemon, sandbox
    daemon.stop()
    registry.stop()


def test_containerd_17_pulled_sandbox_image_is_pinned_until_unpinned_and_every_command_says_so(
        pulling_node: tuple[reg.RegistryContainerd, str]) -> None:
    daemon, sandbox = pulling_node
    endpoint = f"unix://{daemon.address}"
    daemon.clear_images(cri.NAMESPACE)
    cri_pods.pull_image(daemon.address, sandbox)
    # Its CRI labelled every record of the image it made (the tag, the ID, the digest).
    labelled = {i.ref: i.labels.get(PIN) for i in daemon.images()}
    assert len(labelled) == 3 and set(labelled.values()) == {"pinned"}, labelled
    assert story(daemon, sandbox, endpoint) == PINNED_STORY

    item, stderr = unpin(daemon, sandbox)
    rule = f"containerd {containerd_version(daemon)} labels it only when its CRI pulls it or first takes in a record of its name"
    assert item["warning"] == (f"it is the CRI sandbox image and {rule}: the kubelet's GC may delete it now "
                               f"(pinctl pin {sandbox} keeps it)")
    assert "keeps it anyway" not in stderr
    wait_cri_pinned(daemon.address, sandbox, False)
    assert story(daemon, sandbox, endpoint) == unpinned_story(rule, sandbox)
    # And it stays so: nothing labels it again ...
    assert all(PIN not in i.labels for i in daemon.images())
    # ... until its CRI pulls that name again, which labels it.
    cri_pods.pull_image(daemon.address, sandbox)
    wait_cri_pinned(daemon.address, sandbox, True)
    assert story(daemon, sandbox, endpoint) == PINNED_STORY


# --- containerd 1.7 and 2.1: the sandbox image imported by hand ----------------------------------


@pytest.fixture
def ctd17(containerd17: ContainerdDaemon) -> Iterator[ContainerdDaemon]:
    """The session's containerd 1.7, its k8s.io left as the other modules expect it afterwards."""
    yield reset_k8s_io(containerd17)
    reset_k8s_io(containerd17)


@pytest.fixture(params=["containerd21", "containerd24"], ids=["ctd21", "ctd24"])
def ctd2x(request: pytest.FixtureRequest) -> Iterator[ContainerdDaemon]:
    """The session's containerd 2.1, then 2.4.2, reset as ``ctd17`` is."""
    daemon: ContainerdDaemon = request.getfixturevalue(request.param)
    yield reset_k8s_io(daemon)
    reset_k8s_io(daemon)


def retagged(daemon: ContainerdDaemon, load_images: LoadImages) -> None:
    """The sandbox image as an air-gapped node often gets it: imported under its mirror's name
    (which the CRI takes in as any image), then tagged with the configured name by hand."""
    daemon.clear_images(cri.NAMESPACE)
    load_images(daemon, [images.recipe(MIRRORED, seed=images.SANDBOX_SEED)])
    daemon.ctr("images", "tag", MIRRORED, daemon.sandbox_image)
    cri.wait_for_refs(daemon.address, [daemon.sandbox_image])


def test_containerd_17_imported_sandbox_image_is_pinned_only_if_its_cri_took_it_in_so(
        ctd17: ContainerdDaemon, load_images: LoadImages, tmp_path: pathlib.Path) -> None:
    daemon, sandbox = ctd17, ctd17.sandbox_image
    endpoint = f"unix://{daemon.address}"
    # ctr images import of the configured name: the CRI takes the record in and labels it.
    daemon.clear_images(cri.NAMESPACE)
    images.ensure_sandbox_image(daemon)
    wait_cri_pinned(daemon.address, sandbox, True)
    assert story(daemon, sandbox, endpoint) == PINNED_STORY
    # So does pinctl import, which makes the record as any client does.
    daemon.clear_images(cri.NAMESPACE)
    archive = tmp_path / "pause.tar"
    images.build_archive(archive, [images.recipe(sandbox, seed=images.SANDBOX_SEED)])
    assert pinctl(daemon, "import", "-n", "k8s.io", str(archive)).returncode == 0
    wait_cri_pinned(daemon.address, sandbox, True)
    assert story(daemon, sandbox, endpoint) == PINNED_STORY

    # Tagged from an image the CRI manages already: the new record is the CRI's from the start,
    # so nothing labels it, and the kubelet is told pinned: false.
    retagged(daemon, load_images)
    assert not cri.by_tag(cri.list_images(daemon.address))[sandbox].pinned
    rule = f"containerd {containerd_version(daemon)} labels it only when its CRI pulls it or first takes in a record of its name"
    assert story(daemon, sandbox, endpoint) == unpinned_story(rule, sandbox)
    why = {r["ref"]: r for r in run_json(daemon, "ls")["images"]}[sandbox]["reasons"]
    assert why == [{"kind": "sandbox", "detail": sandbox}, {"kind": "unlabelled-sandbox", "detail": rule}]
    # The fix check names works.
    assert pinctl(daemon, "pin", sandbox).returncode == 0
    wait_cri_pinned(daemon.address, sandbox, True)
    assert story(daemon, sandbox, endpoint) == PINNED_STORY


def test_containerd_2x_pins_its_sandbox_image_by_config_whatever_came_before(
        ctd2x: ContainerdDaemon, load_images: LoadImages) -> None:
    daemon, sandbox = ctd2x, ctd2x.sandbox_image
    endpoint = f"unix://{daemon.address}"
    retagged(daemon, load_images)
    wait_cri_pinned(daemon.address, sandbox, True)
    assert story(daemon, sandbox, endpoint) == PINNED_STORY
    item, stderr = unpin(daemon, sandbox)
    line = next(number for number, text in enumerate(daemon.config_path.read_text().splitlines(), 1)
                if text.strip().startswith("sandbox ="))
    assert item["warning"] == ("containerd will pin it again, at once and at its next start: it is the CRI sandbox "
                               f"image (pinned_images.sandbox in {daemon.config_path}:{line})")
    assert "may delete" not in stderr and "keeps it anyway" not in stderr
    wait_cri_pinned(daemon.address, sandbox, True)
    assert story(daemon, sandbox, endpoint) == PINNED_STORY


# --- cri-dockerd 0.4.3 -----------------------------------------------------------------------------


def test_cri_dockerd_pins_its_sandbox_image_by_name_and_unpin_says_so(
        containerd17: ContainerdDaemon, dockerd_containerd_store: DockerDaemon, cri_dockerd_043: CriDockerd,
        docker_images: LoadDocker) -> None:
    sandbox = cri_dockerd_043.sandbox_image
    docker_images([images.recipe(sandbox, seed=images.SANDBOX_SEED)])
    env = {"DOCKER_HOST": dockerd_containerd_store.host}
    got = story(containerd17, sandbox, cri_dockerd_043.endpoint, namespace="moby", env=env)
    # prune -n moby deletes through Docker's own API, which pins nothing: pinctl keeps it all the same.
    assert got == Story(True, True, None, "protected: pinned", "kept; the sandbox image"), got
    result = pinctl(containerd17, "unpin", "-n", "moby", sandbox, env=env)
    assert result.returncode == 0, result.stderr
    assert (f"{sandbox}: cri-dockerd keeps it anyway: it pins its sandbox image (--pod-infra-container-image) by name"
            in result.stderr), result.stderr
    assert story(containerd17, sandbox, cri_dockerd_043.endpoint, namespace="moby", env=env) == got


# --- pinctl cri-proxy in front of containerd 1.7 ---------------------------------------------------


@pytest.fixture
def python_proxies() -> Iterator[Callable[..., ProxyProcess]]:
    yield from proxy_factory("python")


def test_through_cri_proxy_containerd_17s_unlabelled_sandbox_image_is_kept(
        ctd17: ContainerdDaemon, load_images: LoadImages, python_proxies: Callable[..., ProxyProcess]) -> None:
    daemon, sandbox = ctd17, ctd17.sandbox_image
    retagged(daemon, load_images)
    proxy = python_proxies(daemon)
    through = f"unix://{proxy.path}"
    def status_pinned(address: str) -> bool:
        found = cri_pods.image_status(address, sandbox)
        assert found is not None
        return found.pinned

    for pinned in (lambda address: cri.by_tag(cri.list_images(address))[sandbox].pinned, status_pinned):
        assert (pinned(daemon.address), pinned(proxy.path)) == (False, True)
    # containerd itself does not pin it (ls), the kubelet through the proxy is told it is pinned,
    # and what the kubelet is told is what check, gc plan and prune go by.
    assert story(daemon, sandbox, through) == Story(False, True, None, "protected: pinned",
                                                    "kept; the sandbox image; pinned by the runtime")

"""pull and sync --pull against a real registry (docker-registry 2.8 on loopback, images pushed
with skopeo) through the CRI of containerd 1.7 and 2.1, configured for the registry with a hosts.toml.

Results are read back independently: the CRI's own image list (pinned as the kubelet sees it)
and containerd's image records through ctr.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import engine_unavailable
from tests.harness import cri, images, pods
from tests.harness import registry as reg
from tests.integration.pinctl_runner import pinctl

pytestmark = pytest.mark.integration

PIN = "io.cri-containerd.pinned"
MIB = 1024 * 1024
# Registry requests one CRI PullImage makes before a 500 on the manifest fails it, as the
# FailingProxy counted them: 1.7 tries HEAD, then GET; 2.1's resolver asks once more, so a
# pull through 2.1 rides out one 500 more on its own.
RESOLVE_REQUESTS = {"containerd-1.7": 2, "containerd-2.1": 3, "containerd-2.4": 3}
# For a test of what pinctl alone decides: the node on containerd 1.7 only.
ONE_NODE = pytest.mark.parametrize("node", ["containerd-1.7"], ids=["ctd17"], indirect=True)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[reg.Registry]:
    why = reg.available()
    if why:
        engine_unavailable(why)
    running = reg.Registry(tmp_path_factory.mktemp("registry")).start()
    yield running
    running.stop()


@pytest.fixture(scope="module", params=["containerd-1.7", "containerd-2.1", "containerd-2.4"], ids=["ctd17", "ctd21", "ctd24"])
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         registry: reg.Registry) -> Iterator[reg.RegistryContainerd]:
    """containerd 1.7, then 2.1, on a 48 MiB tmpfs (so the disk budget is real), reaching the registry.
    Every test here pulls through the CRI, whose pull path 2.x rewrote (the transfer service)."""
    engine: str = request.param
    base = tmp_path_factory.mktemp("pull-node")
    fs = pods.DedicatedFs(base / "data", 48 * MIB).open()
    daemon = reg.RegistryContainerd(engine, base / "daemon", data_dir=fs.path)
    daemon.add_host(registry.host)
    try:
        daemon.start()
    except Exception as exc:  # noqa: BLE001 - an engine that cannot start skips (fails in CI)
        fs.close()
        engine_unavailable(f"{engine} unavailable: {exc}")
    yield daemon
    daemon.stop()
    fs.close()


@pytest.fixture
def clean(node: reg.RegistryContainerd) -> reg.RegistryContainerd:
    node.clear_images(cri.NAMESPACE)
    images.ensure_sandbox_image(node)  # k8s.io exists, as on any node that ran a pod
    return node


def run(daemon: reg.RegistryContainerd, *args: str, env: dict[str, str] | None = None) -> Any:
    return pinctl(daemon, *args, "-r", daemon.address, "-n", "k8s.io", env=env)


def push(registry: reg.Registry, tmp_path: pathlib.Path, name: str, seed: str, layer_bytes: int = 64) -> str:
    ref = f"{registry.host}/pinctl/{name}"
    registry.push(tmp_path / "push", images.recipe(ref, seed=seed, layer_bytes=layer_bytes, compress=False))
    return ref


def cri_pinned(daemon: reg.RegistryContainerd) -> dict[str, bool]:
    return {tag: image.pinned for image in cri.list_images(daemon.address) for tag in image.repo_tags}


def test_pull_and_pin_shows_pinned_to_the_cri(clean: reg.RegistryContainerd, registry: reg.Registry,
                                              tmp_path: pathlib.Path) -> None:
    one = push(registry, tmp_path, "one:1", "pull-one")
    two = push(registry, tmp_path, "two:1", "pull-two")
    result = run(clean, "pull", "--pin", one, two, "-o", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [(p["ref"], p["action"], p["pin"]) for p in document["pulls"]] == [
        (one, "pulled", "pinned"), (two, "pulled", "pinned")]
    assert all(p["size"] and p["size"] > 0 for p in document["pulls"])  # the registry told the size
    pinned = cri_pinned(clean)
    assert pinned[one] and pinned[two]
    again = run(clean, "pull", one, "-o", "json")
    assert again.returncode == 0 and json.loads(again.stdout)["pulls"][0]["action"] == "present"


def test_pull_without_pin_writes_no_label(clean: reg.RegistryContainerd, registry: reg.Registry,
                                          tmp_path: pathlib.Path) -> None:
    ref = push(registry, tmp_path, "plain:1", "pull-plain")
    assert run(clean, "pull", ref).returncode == 0
    assert cri_pinned(clean)[ref] is False


def test_missing_tag_fails_that_item_only(clean: reg.RegistryContainerd, registry: reg.Registry,
                                          tmp_path: pathlib.Path) -> None:
    ref = push(registry, tmp_path, "here:1", "pull-here")
    missing = f"{registry.host}/pinctl/here:nope"
    result = run(clean, "pull", "--pin", ref, missing, "-o", "json")
    assert result.returncode == 3, result.stderr
    pulls = {p["ref"]: p for p in json.loads(result.stdout)["pulls"]}
    assert pulls[ref]["action"] == "pulled" and pulls[missing]["action"] == "failed"
    assert "not found" in pulls[missing]["why"]
    assert missing not in cri_pinned(clean)


def test_registry_down_is_one_failure_per_image(clean: reg.RegistryContainerd, tmp_path: pathlib.Path) -> None:
    down = f"127.0.0.1:{reg.free_port()}"
    clean.add_host(down)
    result = run(clean, "pull", "--retries", "0", f"{down}/pinctl/gone:1")
    assert result.returncode == 1
    assert "connection refused" in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_500_then_recovers_with_retries(clean: reg.RegistryContainerd, registry: reg.Registry,
                                        tmp_path: pathlib.Path) -> None:
    push(registry, tmp_path, "flaky:1", "pull-flaky")
    # pinctl's own size probe takes one failure; the runtime's first pull meets the others and
    # fails, so pinctl's retry is what succeeds.
    proxy = reg.FailingProxy(registry.host, failures=1 + RESOLVE_REQUESTS[clean.engine])
    try:
        clean.add_host(proxy.host)
        ref = f"{proxy.host}/pinctl/flaky:1"
        result = run(clean, "pull", "--pin", ref, "-o", "json")
        assert result.returncode == 0, result.stdout + result.stderr
        item = json.loads(result.stdout)["pulls"][0]
        assert item["action"] == "pulled" and item["attempts"] > 1
        assert cri_pinned(clean)[ref]
        proxy.seen, proxy.failures = 0, 1000
        no_retry = run(clean, "pull", "--retries", "0", "--always", ref, "-o", "json")
        assert no_retry.returncode == 1 and "500" in json.loads(no_retry.stdout)["pulls"][0]["why"]
    finally:
        proxy.close()


@ONE_NODE  # pinctl's disk budget, decided before any pull
def test_too_large_for_the_budget_is_skipped(clean: reg.RegistryContainerd, registry: reg.Registry,
                                             tmp_path: pathlib.Path) -> None:
    small = push(registry, tmp_path, "small:1", "pull-small")
    big = push(registry, tmp_path, "big:1", "pull-big", layer_bytes=12 * MIB)
    result = run(clean, "pull", "--max-usage", "60", small, big, "-o", "json")
    assert result.returncode == 3, result.stderr
    pulls = {p["ref"]: p for p in json.loads(result.stdout)["pulls"]}
    assert pulls[small]["action"] == "pulled"
    assert pulls[big]["action"] == "skipped" and "no room" in pulls[big]["why"]
    assert big not in cri_pinned(clean)
    alone = run(clean, "pull", "--max-usage", "60", big, "-o", "json")
    assert alone.returncode == 1, alone.stderr  # the one name given was not pulled
    assert json.loads(alone.stdout)["status"] == "error"


@ONE_NODE  # pinctl's SIGINT while it waits to retry; the CRI is never reached
def test_sigint_stops_without_a_label(clean: reg.RegistryContainerd, registry: reg.Registry,
                                      tmp_path: pathlib.Path) -> None:
    push(registry, tmp_path, "slow:1", "pull-slow")
    proxy = reg.FailingProxy(registry.host, failures=1000)  # every attempt fails: pinctl waits to retry
    try:
        clean.add_host(proxy.host)
        ref = f"{proxy.host}/pinctl/slow:1"
        env = {**os.environ, "CONTAINERD_ADDRESS": clean.address, "PINCTL_CONTAINERD_CONFIG": str(clean.config_path)}
        # A suite started in the background (nohup, `cmd &`) ignores SIGINT, and an ignored signal
        # stays ignored across exec: pinctl would inherit that. It gets the default, as at a shell.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            proc = subprocess.Popen([sys.executable, "-m", "pinctl", "pull", "--pin", "--retries", "10", ref,
                                     "-r", clean.address, "-n", "k8s.io"], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        finally:
            signal.signal(signal.SIGINT, previous)
        # The interrupt must come while pinctl waits to retry, however long a busy machine
        # takes to get it there: after its first request, never on a deadline.
        deadline = time.monotonic() + 300
        while proxy.seen == 0 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.seen > 0 and proc.poll() is None, ("pinctl never reached the registry", proc.poll())
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)  # a bound, not a speed: it stops at its next step
        assert proc.returncode == 130, (out, err)
        assert "Traceback" not in err
        assert ref not in cri_pinned(clean)
    finally:
        proxy.close()


@ONE_NODE  # pinctl's choice of what to pull; sync --pull per engine: the fresh-node test
def test_sync_pull_pulls_exact_refs_and_skips_globs(clean: reg.RegistryContainerd, registry: reg.Registry,
                                                    tmp_path: pathlib.Path) -> None:
    ref = push(registry, tmp_path, "policy:1", "pull-policy")
    config = tmp_path / "pinctl.toml"
    config.write_text(f'pinned_images = ["{ref}", "{registry.host}/pinctl/other*"]\n')
    result = run(clean, "sync", "--pull", "--config", str(config), "-o", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    pulls = {p["ref"]: p for p in document["pulls"]}
    assert pulls[ref]["action"] == "pulled"
    glob = f"{registry.host}/pinctl/other*"
    assert pulls[glob]["action"] == "skipped" and "glob" in pulls[glob]["why"]
    assert cri_pinned(clean)[ref]


def test_basic_auth_over_tls_and_no_password_in_output(clean: reg.RegistryContainerd, tmp_path: pathlib.Path) -> None:
    password = "s3cret-Pa55-for-pinctl"
    ca, cert, key = reg.make_ca_and_cert(tmp_path / "tls")
    secured = reg.Registry(tmp_path / "secured", reg.htpasswd_file(tmp_path / "htpasswd", "puller", password),
                           (cert, key)).start()
    try:
        ref = f"{secured.host}/pinctl/secret:1"
        secured.push(tmp_path / "push", images.recipe(ref, seed="pull-secret"), creds=f"puller:{password}")
        clean.add_host(secured.host, "https", ca)
        denied = run(clean, "pull", ref)
        assert denied.returncode == 1
        wrong = tmp_path / "wrong.json"
        wrong_password = "not-the-Right-one-42"
        encoded_wrong = base64.b64encode(f"puller:{wrong_password}".encode()).decode()
        wrong.write_text(json.dumps({"auths": {secured.host: {"auth": encoded_wrong}}}))
        refused = run(clean, "pull", "--registry-config", str(wrong), ref, "-o", "json")
        assert refused.returncode == 1
        for secret in (wrong_password, encoded_wrong):
            assert secret not in refused.stdout + refused.stderr
        config = tmp_path / "config.json"
        encoded = base64.b64encode(f"puller:{password}".encode()).decode()
        config.write_text(json.dumps({"auths": {f"https://{secured.host}": {"auth": encoded}}}))
        result = run(clean, "pull", "--pin", "--registry-config", str(config), ref, "-o", "json")
        assert result.returncode == 0, result.stdout + result.stderr
        assert cri_pinned(clean)[ref]
        for secret in (password, encoded):
            assert secret not in result.stdout + result.stderr
            assert secret not in clean.log_tail(2000)
    finally:
        secured.stop()


def test_docker_pulls_moby_images_and_pins_them(dockerd_containerd_store: Any, registry: reg.Registry,
                                                tmp_path: pathlib.Path) -> None:
    from tests.harness.docker import load_images_docker, reset_docker

    docker = reset_docker(dockerd_containerd_store)
    store = docker.containerd
    assert store is not None
    # Docker's namespace exists once it has held an image, as on any node that ran a container.
    load_images_docker(docker, tmp_path / "seed", [images.recipe("example.test/seed:1", seed="pull-seed")])
    ref = push(registry, tmp_path, "docked:1", "pull-docked")
    result = pinctl(store, "pull", "-n", "moby", "--pin", ref, "-o", "json",
                    env={"DOCKER_HOST": docker.host})
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert document["runtime"].startswith("Docker at ")
    assert [(p["action"], p["pin"], p["namespace"]) for p in document["pulls"]] == [("pulled", "pinned", "moby")]
    assert docker.docker("image", "inspect", ref, check=False).returncode == 0
    labels = {row.ref: row.labels for row in store.images("moby")}
    assert labels[ref].get(PIN) == "pinned"
    missing = pinctl(store, "pull", "-n", "moby", f"{registry.host}/pinctl/docked:nope",
                     env={"DOCKER_HOST": docker.host})
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    reset_docker(docker)


def without_namespace(daemon: reg.RegistryContainerd, namespace: str = cri.NAMESPACE) -> None:
    """A fresh node's containerd, before any pod ran: no k8s.io. Removal waits for containerd's
    content GC, which holds a namespace until its blobs are gone."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        daemon.clear_images(namespace)
        daemon.ctr("namespaces", "rm", namespace, namespace=namespace, check=False)
        if namespace not in daemon.ctr("namespaces", "ls", "-q").stdout.split():
            return
        time.sleep(0.5)
    raise AssertionError(f"could not remove namespace {namespace}: {daemon.ctr('namespaces', 'ls').stdout}")


def test_a_first_pull_on_a_fresh_node_creates_the_namespace_and_pins(node: reg.RegistryContainerd,
                                                                     registry: reg.Registry,
                                                                     tmp_path: pathlib.Path) -> None:
    """Node prep before any pod ran: containerd has no k8s.io yet; pull -n k8s.io --pin works."""
    without_namespace(node)
    ref = push(registry, tmp_path, "first:1", "pull-first")
    result = run(node, "pull", "--pin", ref, "-o", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["pulls"][0]["pin"] == "pinned"
    assert cri_pinned(node)[ref] is True
    images.ensure_sandbox_image(node)  # leave the namespace as the other tests expect it


def test_always_repulls_and_keeps_the_pin(clean: reg.RegistryContainerd, registry: reg.Registry,
                                          tmp_path: pathlib.Path) -> None:
    ref = push(registry, tmp_path, "again:1", "pull-again")
    assert run(clean, "pull", "--pin", ref).returncode == 0
    result = run(clean, "pull", "--always", ref, "-o", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["pulls"][0]["action"] == "pulled"
    labels = {row.ref: row.labels for row in clean.images(cri.NAMESPACE)}
    assert labels[ref].get(PIN) == "pinned" and cri_pinned(clean)[ref] is True


def test_sync_pull_on_a_fresh_node_pulls_then_labels(node: reg.RegistryContainerd, registry: reg.Registry,
                                                     tmp_path: pathlib.Path) -> None:
    without_namespace(node)
    ref = push(registry, tmp_path, "prep:1", "pull-prep")
    config = tmp_path / "config.toml"
    config.write_text(f'pinned_images = ["{ref}"]\n')
    result = run(node, "sync", "--pull", env={"PINCTL_CONFIG": str(config)})
    assert result.returncode == 0, result.stderr
    labels = {row.ref: row.labels for row in node.images(cri.NAMESPACE)}
    assert labels[ref].get(PIN) == "pinned" and cri_pinned(node)[ref] is True
    images.ensure_sandbox_image(node)

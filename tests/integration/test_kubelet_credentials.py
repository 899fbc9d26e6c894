"""The credential trap (KEP-2535) with the real kubelet v1.37.2: a pinned, side-loaded image that
the kubelet will not run from disk, and `pinctl check` saying so before it happens.

Each test is one node of its own: containerd 1.7 or 2.4.2 (pulling from a loopback registry with
basic auth through hosts.toml), dockerd 26 on its containerd store with cri-dockerd v0.4.3, or
CRI-O v1.34.0. The image is side-loaded (`pinctl import --pin`; on CRI-O, which adds images only
by pulling, `crictl pull` and its own pinned_images) as REGISTRY/side/app:1, a name the registry
does not serve (CRI-O's is deleted from it after), and pushed as REGISTRY/private/app:1 (the same
content, so the same image ID). The kubelet has node credentials for the registry (config.json
in its root dir), so what it pulls is recorded as usable by every pod (nodePodsAccessible).

1. AlwaysVerify: check predicts a pull of the side name (no record); a pod using it makes the
   kubelet pull it, which fails (the registry has no side/app), though the image is on disk.
2. The default policy, NeverVerifyPreloadedImages: check says preloaded; a pod using it runs.
3. A pod using the private name: the kubelet pulls it with the credentials and writes its record.
   On containerd check reads that record (the kubelet's own file) and predicts kubernetes #138175
   for the side name; a pod using the side name makes the kubelet pull it again, which fails.
   On cri-dockerd and CRI-O the record is filed under the repository digest PullImage answered,
   which the kubelet's lookups by image ID never match: check says preloaded still, and a pod
   using the side name runs without a pull.
4. (containerd) That record made undecodable: check says any pod pulls the private name again;
   the kubelet, restarted, does so and writes the record anew, and check says so.

What the kubelet did is read from its events (logged at level 3) and the CRI, never from pinctl.
The exit code is the pins' alone (1 on cri-dockerd, which reads no pin label). 4 tests, 36 s on
quiet cores, about 95 s beside other suites.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import json
import pathlib
import re
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any, Optional, cast

import pytest

from tests.harness import containerd as ctd
from tests.harness import cri, cri_pods, debs, engines, kubelet, pods, runnable
from tests.harness import registry as reg
from tests.harness.containerd import ContainerdDaemon, DaemonError
from pinctl.refs import DEFAULT_DOMAIN
from tests.harness import gobuild, images
from tests.harness.crictl import Crictl
from tests.harness.cri_dockerd import CriDockerd
from tests.harness.crio import PAUSE_IMAGE, CrioDaemon, CrioError, registry_path
from tests.harness.kubelet_periodic import remove_all_pods
from tests.harness.docker_pods import HostRuncDocker
from tests.harness.kubelet_fixtures import NODE_FS_BYTES
from tests.harness.kubernetes_build import KubeletBuild
from tests.harness.pod_fixtures import _unavailable
from tests.integration.pinctl_runner import pinctl

pytestmark = pytest.mark.integration

USER, PASSWORD = "puller", "cred-trap-secret"
SEED = "cred-trap"
# CRI-O's names for the loopback registry (its registries.conf sends them there).
CRIO_DOMAIN = "example.test"
# A pull, a pod start, with the rest of the suite beside them.
POD_TIMEOUT_S = 120.0
PULL_LOG_TIMEOUT_S = 120.0


class PullingPodsDaemon(reg.RegistryContainerd, pods.PodsDaemon):
    """A pod-capable containerd whose CRI pulls from the hosts in its certs.d: the kubelet's pulls."""


class Node:
    """A runtime the kubelet talks to (endpoint), the containerd pinctl reads it through (store,
    with env: DOCKER_HOST for Docker), and the registry."""

    def __init__(self, store: ContainerdDaemon, endpoint: str, registry: reg.Registry, base: pathlib.Path,
                 build: KubeletBuild, *, env: Optional[dict[str, str]] = None, namespace: str = cri.NAMESPACE,
                 pins_agree: bool = True, records_by_image_id: bool = True) -> None:
        self.store, self.endpoint, self.registry, self.base, self.build = store, endpoint, registry, base, build
        self.env = dict(env or {})
        self.namespace = namespace
        # cri-dockerd 0.4.3 reads no pin label: there check's pins disagree (exit 1), whatever the kubelet does.
        self.pins_agree = pins_agree
        # What the runtime's PullImage answers, and so what the kubelet keys its pull record by: the
        # image ID (containerd), or a repository digest (cri-dockerd), which its lookups never match.
        self.records_by_image_id = records_by_image_id
        self.kubelets: list[kubelet.Kubelet] = []

    def name(self, path: str) -> str:
        """The name pods use for the registry's path."""
        return f"{self.registry.host}/{path}"

    def repository(self, path: str) -> str:
        return self.name(path).rsplit(":", 1)[0]

    def credentials_host(self) -> str:
        return self.registry.host

    def push(self, archive: pathlib.Path, path: str) -> None:
        """Into the registry, layers as they are (--preserve-digests): the same manifest too,
        which is Docker's image ID on its containerd store."""
        subprocess.run([reg.SKOPEO_BIN, "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false",
                        "--dest-creds", f"{USER}:{PASSWORD}", f"oci-archive:{archive}",
                        f"docker://{self.registry.host}/{path}"], check=True, capture_output=True, timeout=120)

    def pinctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return pinctl(self.store, *args, env=self.env)

    def side_load(self, archive: pathlib.Path, ref: str) -> None:
        """Onto the node without the kubelet, pinned: `pinctl import --pin`."""
        imported = self.pinctl("import", "--pin", "-n", self.namespace, "-r", self.endpoint, "--max-usage", "99",
                               str(archive))
        assert imported.returncode == 0, imported.stderr

    def listed(self) -> dict[str, cri.CriImage]:
        return cri.by_tag(cri.list_images(self.endpoint))

    def start_kubelet(self, policy: str) -> kubelet.Kubelet:
        """A kubelet with this verification policy ("" leaves the field out: its default), and
        node credentials for the registry. Each policy has a root dir (records) of its own: a
        kubelet stopped mid-pull leaves a pull intent, which the next one would turn into a record."""
        config: dict[str, Any] = {"imagePullCredentialsVerificationPolicy": policy} if policy else {}
        # Short paths: the kubelet's pod-resources socket must fit a unix socket's 108 bytes.
        made = kubelet.Kubelet(self.base / ("k-" + (policy or "default")), self.endpoint, extra_config=config,
                               binary=self.build.binary)
        made.root_dir.mkdir(parents=True, exist_ok=True)
        auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        (made.root_dir / "config.json").write_text(json.dumps({"auths": {self.credentials_host(): {"auth": auth}}}))
        self.kubelets.append(made)
        try:
            return made.start()
        except kubelet.KubeletError as exc:
            _unavailable(f"kubelet {self.build.version} does not run here: {exc}")

    def check(self, made: kubelet.Kubelet, *args: str) -> subprocess.CompletedProcess[str]:
        result = self.pinctl("check", *args, "-r", self.endpoint, "--kubelet-config", str(made.config_path),
                             "--kubelet-root-dir", str(made.root_dir))
        # The exit code is the pins' alone: the kubelet's warnings leave it as it is.
        assert result.returncode == (0 if self.pins_agree else 1), result.stderr
        assert "Traceback" not in result.stderr
        return result

    def check_json(self, made: kubelet.Kubelet) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.check(made, "-o", "json").stdout)
        return document

    def close(self) -> None:
        for started in self.kubelets:
            started.stop()


def auth_registry(base: pathlib.Path, auth: bool = True) -> reg.Registry:
    """The loopback registry, behind basic auth (USER, PASSWORD) unless auth is False."""
    if (why := reg.available()) is not None:
        _unavailable(why)
    htpasswd = reg.htpasswd_file(base / "htpasswd", USER, PASSWORD) if auth else None
    return reg.Registry(base / "registry", htpasswd).start()


@pytest.fixture(params=["containerd-1.7", "containerd-2.4"])
def node(request: pytest.FixtureRequest, kubelet_binary: KubeletBuild,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """containerd (1.7, 2.4.2) on a loop fs of its own, pulling from the registry through hosts.toml."""
    engine: str = request.param
    base = tmp_path_factory.mktemp("kcred")
    registry = auth_registry(base)
    try:
        context = kubelet.node_daemon(base, NODE_FS_BYTES, engine, daemon_class=PullingPodsDaemon)
        daemon, _fs = context.__enter__()
    except (runnable.PodsUnavailable, debs.EngineUnavailable, DaemonError, cri.CriError, OSError) as exc:
        registry.stop()
        _unavailable(f"{engine} for a kubelet unavailable: {exc}")
    assert isinstance(daemon, PullingPodsDaemon)
    daemon.add_host(registry.host)
    made = Node(daemon, daemon.address, registry, base, kubelet_binary)
    try:
        yield made
    finally:
        made.close()
        context.__exit__(None, None, None)
        registry.stop()


@pytest.fixture
def docker_node(kubelet_binary: KubeletBuild, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """dockerd 26 with the containerd image store (containerd 1.7 on a loop fs of its own), and
    cri-dockerd v0.4.3 in front of it: the kubelet's pulls go through Docker, to the registry."""
    base = tmp_path_factory.mktemp("kcred-docker")
    registry = auth_registry(base)
    closing: list[Any] = [registry.stop]
    try:
        context = kubelet.node_daemon(base, NODE_FS_BYTES, "containerd-1.7")
        store, _fs = context.__enter__()
        closing.append(lambda: context.__exit__(None, None, None))
        docker = HostRuncDocker(base / "docker", containerd_store=True, containerd=store).start()
        closing.append(docker.stop)
        sandbox = base / "sandbox.tar"
        runnable.build_runnable_archive(sandbox, [runnable.sandbox_recipe(ctd.DEFAULT_SANDBOX_IMAGE)])
        docker.load(sandbox)
        front = CriDockerd(engines.CRI_DOCKERD_OLD, docker, base / "cri-dockerd").start()
        closing.append(front.stop)
    except (runnable.PodsUnavailable, debs.EngineUnavailable, DaemonError, cri.CriError, OSError) as exc:
        for close in reversed(closing):
            close()
        _unavailable(f"dockerd with cri-dockerd for a kubelet unavailable: {exc}")
    made = Node(store, front.address, registry, base, kubelet_binary, env={"DOCKER_HOST": docker.host},
                namespace="moby", pins_agree=False, records_by_image_id=False)
    try:
        yield made
    finally:
        made.close()
        for close in reversed(closing):
            close()


class CredentialCrio(CrioDaemon):
    """CRI-O pulling example.test names (and the pause image's) from the loopback registry."""

    registry_prefixes = (DEFAULT_DOMAIN, CRIO_DOMAIN)


class CrioNode(Node):
    """CRI-O v1.34.0: images arrive by pulling only, so the side-loaded image is pulled with crictl
    (not through the kubelet, so preloaded to it) and pinned by CRI-O's own pinned_images."""

    def __init__(self, crio: CrioDaemon, crictl: Crictl, registry: reg.Registry, base: pathlib.Path,
                 build: KubeletBuild) -> None:
        super().__init__(cast(ContainerdDaemon, None), crio.address, registry, base, build, records_by_image_id=False)
        self.crio, self.crictl = crio, crictl

    def name(self, path: str) -> str:
        return f"{CRIO_DOMAIN}/{path}"

    def credentials_host(self) -> str:
        return CRIO_DOMAIN

    def pinctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {key: value for key, value in os.environ.items() if key not in (
            "CONTAINERD_ADDRESS", "PINCTL_CONTAINERD_CONFIG", "CONTAINERD_NAMESPACE", "DOCKER_HOST")}
        env.update(CONTAINER_RUNTIME_ENDPOINT=self.crio.endpoint, PINCTL_CONFIG=str(self.base / "pinctl.toml"))
        return subprocess.run([sys.executable, "-m", "pinctl", *args], capture_output=True, text=True, env=env,
                              timeout=120)

    def side_load(self, archive: pathlib.Path, ref: str) -> None:
        """Pulled with crictl, then deleted from the registry: as on the other nodes, a pull of
        that name by the kubelet fails."""
        path = ref.split("/", 1)[1]
        self.push(archive, path)
        self.crictl.run("pull", ref)
        repository = path.rsplit(":", 1)[0]
        digest = next(name.split("@", 1)[1] for name in self.listed()[ref].repo_digests if "@" in name)
        connection = http.client.HTTPConnection(self.registry.host, timeout=30)
        try:
            connection.request("DELETE", f"/v2/{repository}/manifests/{digest}")
            status = connection.getresponse().status
        finally:
            connection.close()
        assert status == 202, f"the registry did not delete {path}: HTTP {status}"


@pytest.fixture
def crio_node(kubelet_binary: KubeletBuild, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CrioNode]:
    base = tmp_path_factory.mktemp("kcred-crio")
    # No auth here: CRI-O v1.34.0 sent no credentials to the loopback registry behind a registries.conf
    # location ("authentication required", with crictl --creds and the kubelet's alike).
    registry = auth_registry(base, auth=False)
    side = f"{CRIO_DOMAIN}/side/app:1"
    try:
        registry.push(base / "push", images.recipe(f"{registry.host}/{registry_path(PAUSE_IMAGE)}", seed=PAUSE_IMAGE),
                      creds=f"{USER}:{PASSWORD}")
        crio = CredentialCrio(base / "crio", registry.host, pinned_images=(side,)).start()
    except (debs.EngineUnavailable, CrioError, cri.CriError, OSError, subprocess.SubprocessError) as exc:
        registry.stop()
        _unavailable(f"{engines.CRIO} for a kubelet unavailable: {exc}")
    crictl = Crictl(gobuild.binary(engines.CRICTL), crio.endpoint, base / "crictl")
    crictl.run("pull", "--creds", f"{USER}:{PASSWORD}", PAUSE_IMAGE)
    (base / "pinctl.toml").write_text("")
    made = CrioNode(crio, crictl, registry, base, kubelet_binary)
    try:
        yield made
    finally:
        made.close()
        # Killed first: a sandbox's stop gives each container its grace period (busybox sleep
        # ignores SIGTERM), 30 s apiece.
        for container in cri_pods.list_containers(crio.address):
            with contextlib.suppress(cri.CriError):
                cri_pods.stop_container(crio.address, container.id, 0)
        remove_all_pods(crio.address)
        crio.stop()
        registry.stop()


def archive_of(work: pathlib.Path, ref: str) -> tuple[pathlib.Path, str]:
    """An OCI archive of the test's one runnable image under ref (same seed: the same image)."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / (ref.replace("/", "_").replace(":", "_") + ".tar")
    (info,) = runnable.build_runnable_archive(path, [runnable.runnable_recipe(ref, seed=SEED)])
    return path, info.image_id


def record_missed(node: Node, default: kubelet.Kubelet, side: str, private: str, image_id: str) -> None:
    """cri-dockerd and CRI-O: their PullImage answers a repository digest, which the kubelet keys
    its record by, while it looks records up by ImageStatus's image ID: the record never matches,
    so to the kubelet the image stays preloaded, and check, reading the file the lookup reads, agrees."""
    repository = node.repository("private/app:1")
    (record,) = (default.root_dir / "image_manager" / "pulled").iterdir()
    written = json.loads(record.read_text())  # the kubelet's own file
    assert written["imageRef"].startswith(f"{repository}@sha256:") and written["credentialMapping"] == {
        repository: {"nodePodsAccessible": True}}, written
    assert record == record_path(default, written["imageRef"])
    assert not record_path(default, image_id).exists()
    by_name = judged(node.check_json(default), image_id)
    assert (by_name[side]["verdict"], by_name[side]["reason"]) == ("uses", "preloaded"), by_name
    assert (by_name[private]["verdict"], by_name[private]["reason"]) == ("uses", "preloaded"), by_name
    assert f"its record {record} is keyed by the repository digest {written['imageRef']}" in by_name[side]["why"]
    since = len(default.log_text())
    preloaded = kubelet.StaticPod("still-preloaded", side, pull_policy="IfNotPresent")
    default.add_static_pod(preloaded)
    cri_pods.running_container(node.endpoint, default.static_pod_name(preloaded), POD_TIMEOUT_S)
    assert not re.search(r"Pulling image \\?\"" + re.escape(side), default.log_text()[since:])


def judged(document: dict[str, Any], image_id: str) -> dict[str, dict[str, Any]]:
    (item,) = [image for image in document["images"] if image["id"] == image_id]
    return {check["image_name"]: check for check in item["kubelet_checks"]}


def event(made: kubelet.Kubelet, message: str, ref: str, since: int) -> re.Match[str]:
    """The kubelet's event (logged at level 3, its quotes escaped) about ref after character since."""
    quoted = r'\\?"' + re.escape(ref) + r'\\?"'
    return made.wait_for_log(re.escape(message) + " " + quoted, PULL_LOG_TIMEOUT_S, since=since)


def failed_pull(made: kubelet.Kubelet, ref: str, since: int) -> None:
    """The kubelet decided to pull ref though it is on disk, and the pull failed."""
    pulling = event(made, "Pulling image", ref, since)
    event(made, "Failed to pull image", ref, pulling.end())


def test_check_predicts_the_kubelet_pulling_a_pinned_side_loaded_image_again(node: Node) -> None:
    scenario(node)


def test_the_same_through_docker_and_cri_dockerd(docker_node: Node) -> None:
    scenario(docker_node)


def test_the_same_on_crio(crio_node: CrioNode) -> None:
    scenario(crio_node)


def scenario(node: Node) -> None:
    side, private = node.name("side/app:1"), node.name("private/app:1")
    work = node.base / "work"
    side_archive, config_id = archive_of(work, side)
    private_archive, private_config_id = archive_of(work / "private", private)
    assert private_config_id == config_id  # the same image under two names
    # Layers as they are (--preserve-digests): the same manifest too, Docker's image ID on its
    # containerd store.
    node.push(private_archive, "private/app:1")
    node.side_load(side_archive, side)
    image_id = node.listed()[side].id  # the CRI's image ID: the config's digest, or Docker's manifest digest
    assert node.listed()[side].pinned == node.pins_agree

    # 1. AlwaysVerify: no record of the side-loaded image, so every pod makes the kubelet pull it.
    strict = node.start_kubelet("AlwaysVerify")
    document = node.check_json(strict)
    assert document["kubelet"]["policy"] == "AlwaysVerify"
    assert document["kubelet"]["policy_source"] == f"{strict.config_path} imagePullCredentialsVerificationPolicy"
    verdict = judged(document, image_id)[side]
    assert (verdict["verdict"], verdict["reason"]) == ("pulls", "no-record"), verdict
    assert "preloadedImagesVerificationAllowlist" in verdict["fix"]
    said = node.check(strict).stderr
    assert f"check: kubelet: {side}" in said and "under AlwaysVerify" in said and "fix: " in said
    since = len(strict.log_text())
    strict.add_static_pod(kubelet.StaticPod("strict", side, pull_policy="IfNotPresent"))
    failed_pull(strict, side, since)
    assert node.listed()[side].id == image_id  # on disk all along
    strict.remove_static_pod("strict")
    strict.stop()

    # 2. The default policy: the side-loaded image is preloaded, and a pod runs it from disk.
    default = node.start_kubelet("")
    document = node.check_json(default)
    assert document["kubelet"]["policy"] == "NeverVerifyPreloadedImages"
    assert "default" in document["kubelet"]["policy_source"]
    verdict = judged(document, image_id)[side]
    assert (verdict["verdict"], verdict["reason"]) == ("uses", "preloaded"), verdict
    assert document["kubelet"]["warned_images"] == 0
    preloaded = kubelet.StaticPod("preloaded", side, pull_policy="IfNotPresent")
    default.add_static_pod(preloaded)
    cri_pods.running_container(node.endpoint, default.static_pod_name(preloaded), POD_TIMEOUT_S)
    event(default, "Container image", side, 0)
    assert re.search(r"already present on machine and can be accessed by the pod", default.log_text())

    # 3. The kubelet pulls the same image under the private name, with its node credentials.
    pulled = kubelet.StaticPod("pulled", private, pull_policy="IfNotPresent")
    default.add_static_pod(pulled)
    cri_pods.running_container(node.endpoint, default.static_pod_name(pulled), POD_TIMEOUT_S)
    assert node.listed()[private].id == image_id  # one image, two names
    if node.records_by_image_id:
        trap(node, default, side, private, image_id)
    else:
        record_missed(node, default, side, private, image_id)


def record_path(made: kubelet.Kubelet, key: str) -> pathlib.Path:
    return made.root_dir / "image_manager" / "pulled" / ("sha256-" + hashlib.sha256(key.encode()).hexdigest())


def trap(node: Node, default: kubelet.Kubelet, side: str, private: str, image_id: str) -> None:
    """containerd: the kubelet records the pull by the image ID, and kubernetes #138175 follows."""
    repository = node.repository("private/app:1")
    record = record_path(default, image_id)
    written = json.loads(record.read_text())  # the kubelet's own file
    assert written["credentialMapping"] == {repository: {"nodePodsAccessible": True}}, written
    document = node.check_json(default)
    by_name = judged(document, image_id)
    assert (by_name[side]["verdict"], by_name[side]["reason"]) == ("pulls", "other-name"), by_name
    assert "kubernetes #138175" in by_name[side]["why"] and str(record) in by_name[side]["why"]
    assert repository in by_name[side]["why"]
    assert (by_name[private]["verdict"], by_name[private]["reason"]) == ("uses", "node-wide-record")
    assert document["kubelet"]["warned_images"] == 1 and document["kubelet"]["kubelet_problems"] == []
    since = len(default.log_text())
    default.add_static_pod(kubelet.StaticPod("poisoned", side, pull_policy="IfNotPresent"))
    failed_pull(default, side, since)
    assert node.listed()[side].id == image_id

    # 4. A record the kubelet cannot decode: check says it pulls again whatever the policy, and the
    # kubelet (which reads its records into memory when it starts) does so, and writes it anew.
    default.remove_static_pod("poisoned")
    record.write_text("{not json")
    document = node.check_json(default)
    by_name = judged(document, image_id)
    assert (by_name[private]["verdict"], by_name[private]["reason"]) == ("pulls", "unreadable-record"), by_name
    assert [line for line in document["kubelet"]["kubelet_problems"] if str(record) in line and "not JSON" in line]
    default.stop()
    since = len(default.log_text())
    default.start()
    default.add_static_pod(kubelet.StaticPod("again", private, pull_policy="IfNotPresent"))
    event(default, "Pulling image", private, since)
    deadline = time.monotonic() + POD_TIMEOUT_S
    while judged(node.check_json(default), image_id)[private]["verdict"] != "uses":
        assert time.monotonic() < deadline, f"the kubelet did not write {record} anew: {record.read_text()!r}"
        time.sleep(0.5)
    assert json.loads(record.read_text())["credentialMapping"] == written["credentialMapping"]

    # The table: one row, the side-loaded image, pulled again.
    table = node.check(default)
    assert f"check: kubelet: {side}" in table.stderr and "kubernetes #138175" in table.stderr
    header, *rows = table.stdout.splitlines()
    assert "KUBELET" in header and len(rows) == 1, table.stdout
    assert rows[0].split()[0] == side and "pulls again" in rows[0], table.stdout
    print(table.stdout + table.stderr)

"""The credential trap (KEP-2535) with the real kubelet v1.37.2: a pinned, side-loaded image that
the kubelet will not run from disk, and `pinctl check` saying so before it happens.

One node (containerd 1.7 pulling from a loopback registry with basic auth through hosts.toml),
one kubelet restarted once with another policy. The image is side-loaded with `pinctl import --pin`
as REGISTRY/side/app:1, a name the registry does not serve, and pushed to the registry as
REGISTRY/private/app:1 (the same content, so the same image ID). The kubelet has node credentials
for the registry (config.json in its root dir), so what it pulls is recorded as usable by every
pod (nodePodsAccessible).

1. AlwaysVerify: check predicts a pull of the side name (no record); a pod using it makes the
   kubelet pull it, which fails (the registry has no side/app), though the image is on disk.
2. The default policy, NeverVerifyPreloadedImages: check says preloaded; a pod using it runs.
3. A pod using the private name: the kubelet pulls it with the credentials and writes its record;
   check reads that record (the kubelet's own file) and now predicts kubernetes #138175 for the
   side name; a pod using the side name makes the kubelet pull it again, which fails.
4. That record made undecodable: check says any pod pulls the private name again; the kubelet,
   restarted, does so and writes the record anew, and check says so.

What the kubelet did is read from its log and the CRI, never from pinctl. About 40-70 s here on
two busy cores (a kubelet start is a second or two; most of it is pods starting and pull back-off
not mattering: the test waits for the first failed pull only).
"""

from __future__ import annotations

import base64
import hashlib
import json
import pathlib
import re
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness import cri, cri_pods, debs, kubelet, pods, runnable
from tests.harness import registry as reg
from tests.harness.containerd import DaemonError
from tests.harness.kubelet_fixtures import ENGINE, NODE_FS_BYTES
from tests.harness.kubernetes_build import KubeletBuild
from tests.harness.pod_fixtures import _unavailable
from tests.integration.pinctl_runner import pinctl

pytestmark = pytest.mark.integration

USER, PASSWORD = "puller", "cred-trap-secret"
SEED = "cred-trap"
# A pull, a pod start, with the rest of the suite beside them.
POD_TIMEOUT_S = 120.0
PULL_LOG_TIMEOUT_S = 120.0


class PullingPodsDaemon(reg.RegistryContainerd, pods.PodsDaemon):
    """A pod-capable containerd whose CRI pulls from the hosts in its certs.d: the kubelet's pulls."""


class Node:
    def __init__(self, daemon: PullingPodsDaemon, registry: reg.Registry, base: pathlib.Path,
                 build: KubeletBuild) -> None:
        self.daemon, self.registry, self.base, self.build = daemon, registry, base, build
        self.kubelets: list[kubelet.Kubelet] = []

    def start_kubelet(self, policy: str) -> kubelet.Kubelet:
        """A kubelet with this verification policy ("" leaves the field out: its default), sharing
        and node credentials for the registry. Each policy has a root dir (records) of its own: a
        kubelet stopped mid-pull leaves a pull intent, which the next one would turn into a record."""
        config: dict[str, Any] = {"imagePullCredentialsVerificationPolicy": policy} if policy else {}
        made = kubelet.Kubelet(self.base / f"kubelet-{policy or 'default'}", self.daemon.address, extra_config=config, binary=self.build.binary)
        made.root_dir.mkdir(parents=True, exist_ok=True)
        auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        (made.root_dir / "config.json").write_text(json.dumps({"auths": {self.registry.host: {"auth": auth}}}))
        self.kubelets.append(made)
        try:
            return made.start()
        except kubelet.KubeletError as exc:
            _unavailable(f"kubelet {self.build.version} does not run here: {exc}")

    def check(self, made: kubelet.Kubelet, *args: str) -> subprocess.CompletedProcess[str]:
        result = pinctl(self.daemon, "check", *args, "-r", self.daemon.address, "--kubelet-config",
                        str(made.config_path), "--kubelet-root-dir", str(made.root_dir))
        assert result.returncode == 0, result.stderr  # the pins agree: the kubelet's warnings leave it 0
        assert "Traceback" not in result.stderr
        return result

    def check_json(self, made: kubelet.Kubelet) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.check(made, "-o", "json").stdout)
        return document


@pytest.fixture
def node(kubelet_binary: KubeletBuild, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    if (why := reg.available()) is not None:
        _unavailable(why)
    base = tmp_path_factory.mktemp("kubelet-credentials")
    registry = reg.Registry(base / "registry", reg.htpasswd_file(base / "htpasswd", USER, PASSWORD)).start()
    try:
        context = kubelet.node_daemon(base, NODE_FS_BYTES, ENGINE, daemon_class=PullingPodsDaemon)
        daemon, _fs = context.__enter__()
    except (runnable.PodsUnavailable, debs.EngineUnavailable, DaemonError, cri.CriError, OSError) as exc:
        registry.stop()
        _unavailable(f"{ENGINE} for a kubelet unavailable: {exc}")
    assert isinstance(daemon, PullingPodsDaemon)
    daemon.add_host(registry.host)
    made = Node(daemon, registry, base, kubelet_binary)
    try:
        yield made
    finally:
        for started in made.kubelets:
            started.stop()
        context.__exit__(None, None, None)
        registry.stop()


def archive_of(work: pathlib.Path, ref: str) -> tuple[pathlib.Path, str]:
    """An OCI archive of the test's one runnable image under ref (same seed: the same image)."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / (ref.replace("/", "_").replace(":", "_") + ".tar")
    (info,) = runnable.build_runnable_archive(path, [runnable.runnable_recipe(ref, seed=SEED)])
    return path, info.image_id


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
    host = node.registry.host
    side, private = f"{host}/side/app:1", f"{host}/private/app:1"
    work = node.base / "work"
    side_archive, image_id = archive_of(work, side)
    private_archive, private_id = archive_of(work / "private", private)
    assert private_id == image_id  # the same image under two names
    subprocess.run([reg.SKOPEO_BIN, "copy", "--quiet", "--dest-tls-verify=false", "--dest-creds", f"{USER}:{PASSWORD}",
                    "--dest-compress-format", "gzip", "--dest-compress-level", "0", f"oci-archive:{private_archive}",
                    f"docker://{private}"], check=True, capture_output=True, timeout=120)
    imported = pinctl(node.daemon, "import", "--pin", "-r", node.daemon.address, "--max-usage", "99", str(side_archive))
    assert imported.returncode == 0, imported.stderr
    assert cri.by_tag(cri.list_images(node.daemon.address))[side].pinned

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
    assert cri.by_tag(cri.list_images(node.daemon.address))[side].pinned  # on disk all along
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
    container = cri_pods.running_container(node.daemon.address, default.static_pod_name(preloaded), POD_TIMEOUT_S)
    assert container.image_ref == image_id
    event(default, "Container image", side, 0)
    assert re.search(r"already present on machine and can be accessed by the pod", default.log_text())

    # 3. The kubelet pulls the same image under the private name, with its node credentials, and
    # records it: kubernetes #138175.
    pulled = kubelet.StaticPod("pulled", private, pull_policy="IfNotPresent")
    default.add_static_pod(pulled)
    cri_pods.running_container(node.daemon.address, default.static_pod_name(pulled), POD_TIMEOUT_S)
    record = default.root_dir / "image_manager" / "pulled" / ("sha256-" + hashlib.sha256(image_id.encode()).hexdigest())
    written = json.loads(record.read_text())  # the kubelet's own file
    assert written["credentialMapping"] == {f"{host}/private/app": {"nodePodsAccessible": True}}, written
    document = node.check_json(default)
    by_name = judged(document, image_id)
    assert (by_name[side]["verdict"], by_name[side]["reason"]) == ("pulls", "other-name"), by_name
    assert "kubernetes #138175" in by_name[side]["why"] and str(record) in by_name[side]["why"]
    assert f"{host}/private/app" in by_name[side]["why"]
    assert (by_name[private]["verdict"], by_name[private]["reason"]) == ("uses", "node-wide-record")
    assert document["kubelet"]["warned_images"] == 1 and document["kubelet"]["kubelet_problems"] == []
    since = len(default.log_text())
    default.add_static_pod(kubelet.StaticPod("poisoned", side, pull_policy="IfNotPresent"))
    failed_pull(default, side, since)
    listed = cri.by_tag(cri.list_images(node.daemon.address))
    assert listed[side].id == image_id and listed[side].pinned

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

"""The DaemonSet's pod for real: the image built from the Containerfile (tests/harness/image_build.py,
no Docker daemon), imported into containerd 1.7, and run through the CRI as
deploy/kubernetes/daemonset.yaml describes it (tests/harness/daemonset_pod.py): its args, the
containerd socket and the policy mounted from the node, a read-only root filesystem, every
capability dropped, uid 0. No kubelet runs it: the probes' requests are made by the test.

containerd's root here is not /var/lib/containerd, so the GC metrics' statfs of the image
filesystem the CRI names fails in the pod (logged once, part "gc"); on a node the mount matches.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import engine_unavailable
from tests.harness import cri, daemonset_pod, debs, image_build, images, runnable
from tests.harness.configmap import ConfigMapVolume
from tests.harness.containerd import DaemonError
from tests.harness.daemonset_pod import NetnsPodsDaemon, PodPlan, RunningPod

pytestmark = pytest.mark.integration

PIN = "io.cri-containerd.pinned"
CONFIGMAP = daemonset_pod.ROOT / "deploy" / "kubernetes" / "configmap.yaml"
# Covered by configmap.yaml's policy: an exact name, and a keyword.
AT_START = "example.test/observability/node-exporter:v1.8.2"
ARRIVING = "example.test/storage/csi-node-driver-registrar:v2.10"
LATER = "example.test/later/app:1"
# A changed ConfigMap is read within 3 s (POLL_SECONDS + SETTLE_SECONDS); the rest is a loaded machine.
RELOAD_DEADLINE = 60.0
# The back-off after containerd went away is at most 10 s.
RECONNECT_DEADLINE = 60.0


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, agent_image: image_build.BuiltImage) -> Iterator[NetnsPodsDaemon]:
    try:
        context = daemonset_pod.daemonset_node(tmp_path_factory.mktemp("daemonset"))
        daemon = context.__enter__()
    except (runnable.PodsUnavailable, debs.EngineUnavailable, DaemonError, cri.CriError, OSError) as exc:
        engine_unavailable(f"containerd 1.7 with pods unavailable: {exc}")
    try:
        image_build.import_image(daemon, agent_image)
        yield daemon
    finally:
        context.__exit__(None, None, None)


def configmap_data() -> dict[str, str]:
    found: dict[str, str] = yaml.safe_load(CONFIGMAP.read_text())["data"]
    return found


def pinned(daemon: NetnsPodsDaemon, ref: str) -> bool:
    return {row.ref: row.labels for row in daemon.images()}.get(ref, {}).get(PIN) == "pinned"


def wait_until(what: str, check: object, timeout: float, pod: RunningPod) -> float:
    started = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - started < timeout, f"not {what} in {timeout} s:\n{pod.log_text()}"
        time.sleep(0.1)
    return time.monotonic() - started


def load(daemon: NetnsPodsDaemon, work: Path, ref: str) -> None:
    images.load_images(daemon, work, [images.recipe(ref, seed=ref)])


def memory_limit(pid: int) -> int | None:
    """The memory cgroup's limit of a process (cgroup v1 or v2); None where it cannot be read."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            limit = Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.limit_in_bytes"
        elif controllers == "":
            limit = Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.max"
        else:
            continue
        if limit.is_file():
            text = limit.read_text().strip()
            return None if text == "max" else int(text)
    return None


def process_of(daemon: NetnsPodsDaemon, container_id: str) -> int:
    """The pid of the container's first process, from containerd's task list."""
    for line in daemon.ctr("tasks", "ls").stdout.splitlines()[1:]:
        task, pid, *_ = line.split()
        if task == container_id:
            return int(pid)
    raise AssertionError(f"no task {container_id}")


def test_the_daemonsets_pod_runs_as_the_manifest_says(node: NetnsPodsDaemon, agent_image: image_build.BuiltImage,
                                                       tmp_path: Path) -> None:
    found: PodPlan = daemonset_pod.plan(daemonset_pod.manifest())
    (config_mount,) = [mount for mount in found.mounts if mount.kind == "configMap"]
    volume = ConfigMapVolume(tmp_path / "configmap", default_mode=config_mount.default_mode)
    volume.write(configmap_data())
    sources = {"/run/containerd": node.socket_dir,
               "/var/lib/containerd": node.data_dir / "root", config_mount.source: volume.root,
               "/var/lib/pinctl/history": tmp_path / "history"}
    work = tmp_path / "archives"
    load(node, work, AT_START)
    port = found.ports["metrics"]

    pod = daemonset_pod.run_pod(node, found, agent_image.name, sources)
    wait_until("ready", lambda: daemonset_pod.get(node.netns, found.readiness[1], found.readiness[0])[0] == 200,
               30, pod)
    code, body = daemonset_pod.get(node.netns, port, found.readiness[0])
    assert body.startswith("ok: connected to containerd at /run/containerd/containerd.sock"), body
    code, body = daemonset_pod.get(node.netns, port, found.liveness[0])
    assert code == 200 and body.startswith("ok: the watch loop turned"), body
    code, text = daemonset_pod.get(node.netns, port, "/metrics")
    assert code == 200 and "pinctl_ready 1.0" in text.splitlines()

    # What the securityContext asked for, as the container's process has it.
    pid = process_of(node, pod.container_id)
    status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                  if ":\t" in line)
    assert status["Uid"].split()[:2] == ["0", "0"] and status["Gid"].split()[:2] == ["0", "0"]
    assert int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0, "every capability dropped"
    assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2", "no escalation; seccomp"
    mounted = {line.split()[4]: line.split() for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()}
    for path in ("/", *(mount.container_path for mount in found.mounts if mount.read_only)):
        assert "ro" in mounted[path][5].split(","), f"{path} is not read-only: {mounted[path]}"
    for mount in found.mounts:
        if mount.propagation == 1:  # HostToContainer: a slave of the node's mount
            assert any(field.startswith("master:") for field in mounted[mount.container_path][6:]), mounted
    argv = [part.decode() for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if part]
    assert argv[-len(found.args):] == list(found.args), argv
    limit = memory_limit(pid)
    assert limit in (None, found.memory_limit_bytes), f"memory limit {limit}, the manifest says {found.memory_limit_bytes}"
    rss = int(status["VmRSS"].split()[0]) * 1024
    assert rss < found.memory_limit_bytes / 2, f"pinctl uses {rss >> 20} MiB of its {found.memory_limit_bytes >> 20} MiB"

    # The policy the ConfigMap holds: an image there at start, one that arrives.
    wait_until(f"{AT_START} pinned", lambda: pinned(node, AT_START), 60, pod)
    load(node, work, ARRIVING)
    wait_until(f"{ARRIVING} pinned", lambda: pinned(node, ARRIVING), 60, pod)
    assert {"full sync", "pinned"} <= set(pod.messages()), pod.log_text()

    # A ConfigMap update, applied without restarting the pod.
    started_at = pod.status().started_at
    load(node, work, LATER)
    data = configmap_data()
    data["config.toml"] = data["config.toml"].replace("pinned_images = [", 'pinned_images = [\n  "example.test/later/*",')
    volume.write(data)
    took = wait_until(f"{LATER} pinned", lambda: pinned(node, LATER), RELOAD_DEADLINE, pod)
    assert "config reloaded" in pod.messages(), pod.log_text()
    status_now = pod.status()
    assert status_now.state == "running" and status_now.started_at == started_at, "the container was not restarted"

    # containerd away: not ready (and not restarted: alive); back: ready again, as the probes say.
    node.stop()
    wait_until("not ready", lambda: daemonset_pod.get(node.netns, port, "/readyz")[0] == 503, 60, pod)
    code, body = daemonset_pod.get(node.netns, port, "/readyz")
    assert body.startswith("not ok: not connected to containerd at /run/containerd/containerd.sock"), body
    assert daemonset_pod.get(node.netns, port, "/healthz")[0] == 200
    node.start()
    wait_until("ready again", lambda: daemonset_pod.get(node.netns, port, "/readyz")[0] == 200,
               RECONNECT_DEADLINE, pod)

    # SIGTERM, as the kubelet stops it: exit 0 inside the grace period. Shown by order, not by the
    # clock: the runtime SIGKILLs a container still running when the grace period ends (exit 137).
    seconds = pod.stop(found.grace_seconds)
    final = pod.status()
    assert final.state == "exited" and final.exit_code == 0, (final, pod.log_text())
    assert pod.messages()[-1] == "stopped"
    print(f"reload applied {took:.1f} s after the ConfigMap changed; stopped in {seconds:.2f} s; "  # noqa: T201
          f"RSS {rss >> 20} MiB (limit {limit}); image built in {agent_image.seconds} (cached: {agent_image.cached})")


def test_the_image_runs_pinctl_as_root_with_the_watch_command(agent_image: image_build.BuiltImage) -> None:
    """The Containerfile's last stage, as built: pinctl is the entrypoint, uid 0."""
    import json
    import tarfile

    with tarfile.open(agent_image.archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        (entry,) = index["manifests"]
        assert entry["annotations"][images.ANNOTATION_IMAGE_NAME] == agent_image.name
        manifest = json.load(tar.extractfile("blobs/sha256/" + entry["digest"].split(":")[1]))  # type: ignore[arg-type]
        config = json.load(tar.extractfile("blobs/sha256/" + manifest["config"]["digest"].split(":")[1]))  # type: ignore[arg-type]
    settings = config["config"]
    assert settings["Entrypoint"] == ["pinctl"] and settings["User"] == "0:0", settings
    assert settings["Cmd"][:2] == ["sync", "--watch"], settings
    assert any(re.match(r"PATH=/opt/pinctl/bin:", env) for env in settings["Env"]), settings["Env"]

"""The engines beyond containerd 1.6/1.7 and dockerd 26: containerd 2.1, cri-dockerd, crictl.

Each is fetched or built once per machine (tests/harness/engines.py has the table). Through
cri-dockerd these show what pinctl is for: a containerd pin label on an image in ``moby``
(dockerd's containerd image store) does not reach the kubelet, because cri-dockerd asks
dockerd, which does not pass containerd's image labels on, and pins only its sandbox image.
"""

from __future__ import annotations

import pathlib
import subprocess
from collections.abc import Callable

from tests.harness import cri, docker, engines, gobuild, images
from tests.harness.containerd import ContainerdDaemon
from tests.harness.cri_dockerd import CriDockerd
from tests.harness.crictl import Crictl, by_tag
from tests.harness.docker import DockerDaemon
from tests.harness.engine_fixtures import LoadDocker

PIN = {"io.cri-containerd.pinned": "pinned"}


def sandbox_recipe(daemon: CriDockerd) -> images.ImageRecipe:
    return images.recipe(daemon.sandbox_image, seed=images.SANDBOX_SEED)


def test_containerd21_starts_and_its_cri_lists_images_through_crictl(
    containerd21: ContainerdDaemon,
    crictl: pathlib.Path,
    clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
    load_images: Callable[..., list[images.ImageInfo]],
    tmp_path: pathlib.Path,
) -> None:
    daemon = clean_k8s_io(containerd21)
    assert daemon.version.startswith("2.1."), daemon.version
    assert daemon.config_version == 3
    labelled, plain = load_images(
        daemon, [images.recipe("example.test/c21-labelled:1.0"), images.recipe("example.test/c21-plain:1.0")]
    )
    daemon.label_image(labelled.refs[0], PIN)
    tool = Crictl(crictl, daemon.address, tmp_path / "crictl")
    version = tool.version()
    assert version["RuntimeName"] == "containerd"
    assert version["RuntimeVersion"].lstrip("v").startswith("2.1."), version
    # The CRI learns of the label from an event: wait for it as the harness does elsewhere.
    cri.wait_for(daemon.address, lambda listed: cri.by_tag(listed)[labelled.refs[0]].pinned)
    listed = by_tag(tool.images())
    # containerd's CRI names an image by its config digest; the sandbox image is pinned too.
    assert listed[labelled.refs[0]].id == labelled.image_id
    assert (listed[labelled.refs[0]].pinned, listed[plain.refs[0]].pinned) == (True, False)
    assert listed[daemon.sandbox_image].pinned


def test_cri_dockerd_043_answers_version_and_lists_images_through_crictl(
    cri_dockerd_043: CriDockerd,
    dockerd_containerd_store: DockerDaemon,
    crictl: pathlib.Path,
    docker_images: LoadDocker,
    tmp_path: pathlib.Path,
) -> None:
    (app,) = docker_images([images.recipe("example.test/cdd-app:1.0")])
    tool = Crictl(crictl, cri_dockerd_043.endpoint, tmp_path / "crictl")
    version = tool.version()
    # The CRI names the runtime behind it, docker, with dockerd's version; cri-dockerd
    # names itself in its own --version and its log.
    assert (version["RuntimeName"], version["RuntimeVersion"]) == ("docker", dockerd_containerd_store.version)
    assert version["RuntimeApiVersion"] == "v1"
    own = subprocess.run([str(cri_dockerd_043.binary), "--version"], capture_output=True, text=True, check=True)
    assert own.stdout.split()[:2] == ["cri-dockerd", "0.4.3"], own.stdout
    assert "Starting cri-dockerd 0.4.3" in cri_dockerd_043.log_path.read_text()
    listed = by_tag(tool.images())
    assert app.refs[0] in listed, sorted(listed)
    # What gRPC says straight, decoded by field number, is what crictl prints.
    direct = cri.by_tag(cri_dockerd_043.list_images())
    assert (direct[app.refs[0]].id, direct[app.refs[0]].pinned) == (listed[app.refs[0]].id, False)


def test_cri_dockerd_043_ignores_the_containerd_pin_label_in_moby(
    cri_dockerd_043: CriDockerd,
    dockerd_containerd_store: DockerDaemon,
    crictl: pathlib.Path,
    docker_images: LoadDocker,
    tmp_path: pathlib.Path,
) -> None:
    """The seed (cri-dockerd issue "Arbitrary image pinning support"): the label containerd's
    CRI honours, set on the image in ``moby``, still leaves ``pinned: false``."""
    store = dockerd_containerd_store.containerd
    assert store is not None
    sandbox, app = docker_images([sandbox_recipe(cri_dockerd_043), images.recipe("example.test/cdd-seed:1.0")])
    ref = app.refs[0]
    store.label_image(ref, PIN, namespace=docker.MOBY_NAMESPACE)
    assert {image.ref: image.labels for image in store.images(docker.MOBY_NAMESPACE)}[ref] == PIN
    # dockerd does not show containerd's image labels: only the image config's.
    assert not (dockerd_containerd_store.inspect(ref)["Config"].get("Labels") or {})

    tool = Crictl(crictl, cri_dockerd_043.endpoint, tmp_path / "crictl")
    listed = by_tag(tool.images())
    assert listed[ref].pinned is False, listed[ref].raw
    assert tool.image_status(ref)["status"]["pinned"] is False
    # Its ID is dockerd's: the manifest digest in the containerd store, not the config digest
    # containerd's CRI reports (the seed's crictl shows the index digest ctr shows).
    assert listed[ref].id == app.digest != app.image_id
    # Its sandbox image is pinned: the one image cri-dockerd 0.4.3 pins, matched by exact tag.
    assert listed[cri_dockerd_043.sandbox_image].pinned is True
    assert listed[cri_dockerd_043.sandbox_image].id == sandbox.digest
    assert tool.image_status(cri_dockerd_043.sandbox_image)["status"]["pinned"] is True


def test_go_engines_are_stamped_with_their_go_and_build_times(
    crictl: pathlib.Path, cri_dockerd_043: CriDockerd, record_property: Callable[[str, object], None]
) -> None:
    for name, built in ((engines.CRICTL, crictl), (engines.CRI_DOCKERD_OLD, cri_dockerd_043.binary)):
        stamp = gobuild.read_stamp(name)
        spec = engines.go_engines()[name]
        assert (stamp["version"], stamp["go"]) == (spec.version, gobuild.toolchain().version)
        assert built == gobuild.binary(name) and built.is_file()
        seconds = gobuild.build_seconds(name)
        assert seconds["build"] > 0, stamp
        record_property(f"{name}-build-seconds", seconds)

"""containerd 2.4.2, the current release (config version 4), built from its Go module: it says
it is 2.4.2 (its --version, ctr's server version, the CRI's Version); pinctl ls, pin and unpin
work on it as the CRI reports; and a conf.d drop-in's pinned_images entry, merged with the main
file's sandbox entry, is pinned by containerd itself, while a tagless entry pins nothing (as in
2.1: containerd issue 13314); pinctl ls names the drop-in's file and line as the entry's place and
config lint lists the tagless entry there.

One daemon for the module: the session's ``containerd24``, restarted once with a drop-in in its
conf.d and once more without it.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
from collections.abc import Iterator

import pytest

from tests.conftest import reset_k8s_io
from tests.harness import cri, images
from tests.harness.containerd import ContainerdDaemon
from tests.harness.crictl import Crictl
from tests.integration.pinctl_runner import pinctl, pinctl_json

pytestmark = pytest.mark.integration

PIN = "io.cri-containerd.pinned"
PINNED = "[plugins.'io.containerd.cri.v1.images'.pinned_images]"
PLAIN = "example.test/ctd24/plain:1"  # pinned and unpinned by pinctl
SITE = "example.test/ctd24/site:1"  # an entry of conf.d/10-site.toml
TAGLESS = "example.test/ctd24/tagless"  # an entry of conf.d/10-site.toml without a tag
TAGLESS_IMAGE = TAGLESS + ":latest"
SITE_TEXT = f"version = 4\n\n{PINNED}\n  site = '{SITE}'\n  tools = '{TAGLESS}'\n"
SITE_LINE, TAGLESS_LINE = 4, 5
# A bound, not a pace: the waits end as soon as the CRI says so (a busy machine may take long).
WAIT_S = 60.0


def cri_pinned(daemon: ContainerdDaemon, image_id: str, want: bool) -> bool:
    """What the CRI says of ``image_id``, once it says ``want`` or when it gives up waiting."""
    try:
        listed = cri.wait_for(daemon.address, lambda got: any(i.id == image_id and i.pinned == want for i in got), WAIT_S)
    except cri.CriError:
        listed = cri.list_images(daemon.address)
    return next(i.pinned for i in listed if i.id == image_id)


def pinned_tags(daemon: ContainerdDaemon, want: set[str]) -> set[str]:
    """The CRI's pinned tags once they hold ``want``, or as they are when they never do."""
    def tags(listed: list[cri.CriImage]) -> set[str]:
        return {tag for image in listed if image.pinned for tag in image.repo_tags}
    try:
        return tags(cri.wait_for(daemon.address, lambda listed: tags(listed) >= want, WAIT_S))
    except cri.CriError:
        return tags(cri.list_images(daemon.address))


def ls_by_ref(daemon: ContainerdDaemon) -> dict[str, dict[str, object]]:
    return {row["ref"]: row for row in pinctl_json(daemon, "-a", daemon.address, "ls", "-n", "k8s.io")["images"]}


def test_it_says_it_is_2_4_2(containerd24: ContainerdDaemon, crictl: pathlib.Path, tmp_path: pathlib.Path) -> None:
    said = subprocess.run([str(containerd24.bin_dir / "containerd"), "--version"], capture_output=True, text=True,
                          timeout=30, check=True).stdout
    assert said.split()[:3] == ["containerd", "github.com/containerd/containerd/v2", "v2.4.2"], said
    assert containerd24.version == "2.4.2"  # ctr version's Server
    version = Crictl(crictl, containerd24.address, tmp_path / "crictl").version()
    assert (version["RuntimeName"], version["RuntimeVersion"]) == ("containerd", "v2.4.2"), version
    assert containerd24.config_path.read_text().startswith("version = 4\n")


def test_pinctl_pins_and_unpins_as_the_cri_reports(containerd24: ContainerdDaemon, tmp_path: pathlib.Path) -> None:
    (plain,) = images.load_images(containerd24, tmp_path / "archives", [images.recipe(PLAIN, seed=PLAIN)])
    try:
        assert not cri_pinned(containerd24, plain.image_id, False)
        assert ls_by_ref(containerd24)[PLAIN]["pinned"] is False

        doc = pinctl_json(containerd24, "-a", containerd24.address, "pin", "-n", "k8s.io", PLAIN)
        assert doc["results"] == [{"namespace": "k8s.io", "ref": PLAIN, "action": "pinned", "error": None}]
        assert {row.ref: row.labels for row in containerd24.images()}[PLAIN][PIN] == "pinned"
        assert cri_pinned(containerd24, plain.image_id, True)
        row = ls_by_ref(containerd24)[PLAIN]
        assert row["pinned"] is True and {"kind": "label", "detail": PLAIN} in row["reasons"], row  # type: ignore[operator]

        doc = pinctl_json(containerd24, "-a", containerd24.address, "unpin", "-n", "k8s.io", PLAIN)
        # Every ref of the image: also the sha256:<id> one the CRI added, which was never labelled.
        assert {r["ref"]: r["action"] for r in doc["results"]} == {PLAIN: "unpinned", plain.image_id: "already-unpinned"}
        assert not cri_pinned(containerd24, plain.image_id, False)
        assert ls_by_ref(containerd24)[PLAIN]["pinned"] is False
    finally:
        containerd24.remove_images([PLAIN])


@pytest.fixture(scope="module")
def site_drop_in(containerd24: ContainerdDaemon,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerdDaemon]:
    """The session's containerd 2.4 restarted with conf.d/10-site.toml, and the images its entries
    name loaded after (the CRI labels a record its pinned_images name when the record is made);
    afterwards the drop-in and the images are gone and it runs on its own config again."""
    # The session's daemon, as other modules left it: k8s.io holds only the sandbox image first.
    reset_k8s_io(containerd24)
    drop_in = containerd24.conf_d / "10-site.toml"
    drop_in.write_text(SITE_TEXT)
    try:
        containerd24.restart()
        images.load_images(containerd24, tmp_path_factory.mktemp("ctd24-site"),
                           [images.recipe(ref, seed=ref) for ref in (SITE, TAGLESS_IMAGE)])
        yield containerd24
    finally:
        drop_in.unlink()
        containerd24.remove_images([SITE, TAGLESS_IMAGE])
        containerd24.restart()


def test_a_conf_d_entry_is_pinned_by_containerd_and_a_tagless_one_is_not(site_drop_in: ContainerdDaemon) -> None:
    daemon = site_drop_in
    want = {SITE, daemon.sandbox_image}
    # The drop-in's table merges with the main file's: the sandbox entry stays pinned beside it.
    assert pinned_tags(daemon, want) == want
    labels = {row.ref: row.labels for row in daemon.images()}
    assert labels[SITE].get(PIN) == "pinned"
    # The tagless entry (TAGLESS, meaning TAGLESS:latest to a pull) pins nothing in 2.4.2 either.
    assert PIN not in labels[TAGLESS_IMAGE], labels[TAGLESS_IMAGE]


def test_pinctl_reads_the_version_4_config_and_its_drop_in(site_drop_in: ContainerdDaemon,
                                                           tmp_path: pathlib.Path) -> None:
    daemon = site_drop_in
    pinned_tags(daemon, {SITE})
    drop_in = daemon.conf_d / "10-site.toml"
    rows = ls_by_ref(daemon)
    site = {"kind": "containerd-config", "detail": f"pinned_images.site in {drop_in}:{SITE_LINE}"}
    assert site in rows[SITE]["reasons"], rows[SITE]  # type: ignore[operator]
    assert rows[TAGLESS_IMAGE]["pinned"] is False and rows[TAGLESS_IMAGE]["reasons"] == [], rows[TAGLESS_IMAGE]
    policy = tmp_path / "pinctl.toml"
    policy.write_text("pinned_images = []\n")
    result = pinctl(daemon, "config", "lint", "--offline", "-o", "json", env={"PINCTL_CONFIG": str(policy)})
    assert result.returncode == 1, result.stderr
    problems = json.loads(result.stdout)["problems"]
    assert [(p["kind"], p["pattern"], p["source"]) for p in problems] == [
        ("containerd-entry", TAGLESS, f"{drop_in}:{TAGLESS_LINE}")]


EXPORTED = "example.test/ctd24/exported:1"  # named by the policy only


def test_config_export_writes_a_drop_in_that_containerd_pins_after_a_restart(
        containerd24: ContainerdDaemon, tmp_path: pathlib.Path) -> None:
    """The main config imports conf.d/*.toml: export writes a drop-in for it, naming the file, and
    saved there verbatim it is what containerd 2.4.2 pins at its next start (the image was
    present, unlabelled, before)."""
    daemon = containerd24
    (image,) = images.load_images(daemon, tmp_path / "archives", [images.recipe(EXPORTED, seed=EXPORTED)])
    policy = tmp_path / "pinctl.toml"
    policy.write_text(f'pinned_images = ["{EXPORTED}"]\n')
    result = pinctl(daemon, "config", "export", "--for", "containerd", env={"PINCTL_CONFIG": str(policy)})
    assert result.returncode == 0, result.stderr
    drop_in = daemon.conf_d / "99-pinctl.toml"
    assert f"Save it as {drop_in}" in " ".join(line[2:] for line in result.stdout.splitlines() if line.startswith("# "))
    assert f"save it as {drop_in}" in result.stderr and "restart containerd" in result.stderr
    assert not cri_pinned(daemon, image.image_id, False)
    drop_in.write_text(result.stdout)
    try:
        daemon.restart()
        assert cri_pinned(daemon, image.image_id, True)
        # The main file's sandbox entry is merged with the drop-in's, not replaced.
        assert daemon.sandbox_image in pinned_tags(daemon, {daemon.sandbox_image})
        line = next(n for n, text in enumerate(result.stdout.splitlines(), 1) if text.lstrip().startswith('"pinctl-1"'))
        reason = {"kind": "containerd-config", "detail": f"pinned_images.pinctl-1 in {drop_in}:{line}"}
        row = ls_by_ref(daemon)[EXPORTED]
        assert reason in row["reasons"], row  # type: ignore[operator]
    finally:
        drop_in.unlink()
        daemon.remove_images([EXPORTED])
        daemon.restart()

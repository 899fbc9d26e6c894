"""containerd 2.x's own pinned_images, for real on containerd 2.1: `config export --for containerd`
written into its config makes its CRI pin exactly the policy's images; ls names the entry that
labels an image; unpin says containerd puts the pin back, which it does at once.

One containerd 2.1 of this module's own, since its config changes and it restarts; the policy's
images are loaded before the export, which expands the glob and keyword over what is present.
What the kubelet would be told is read back with crictl.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from tests.conftest import engine_unavailable
from tests.harness import cri, debs, images
from tests.harness.containerd import ContainerdDaemon, DaemonError
from tests.harness.crictl import Crictl
from tests.integration.pinctl_runner import pinctl, pinctl_json

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

pytestmark = pytest.mark.integration

PIN = "io.cri-containerd.pinned"
ENGINE = "containerd-2.1"
# The policy, one pattern of each kind export has to translate for containerd.
POLICY = [
    "example.test/pi/app:1",    # a whole name: written as it is
    "pi-short:1",               # a short name: docker.io/library/pi-short:1, as the CRI names it
    "pi-bare",                  # no tag: :latest added, never written tagless (containerd issue 13314)
    "example.test/pi/glob/*",   # a glob: expanded to the two present
    "*pi-keyword*",             # a keyword: expanded to the one present
]
COVERED = ["example.test/pi/app:1", "docker.io/library/pi-short:1", "docker.io/library/pi-bare:latest",
           "example.test/pi/glob/a:1", "example.test/pi/glob/b:2", "example.test/pi-keyword-x:1"]
UNCOVERED = "example.test/pi/other:1"
# Written by hand beside the export, to show what export avoids: this entry pins nothing.
TAGLESS_ENTRY = ("by-hand-tagless", "example.test/pi/tagless")
TAGLESS_IMAGE = "example.test/pi/tagless:latest"


@dataclass
class Exported:
    daemon: ContainerdDaemon
    policy: pathlib.Path
    table: dict[str, str]
    notes: str
    ids: dict[str, str]  # ref -> image ID


def settle(daemon: ContainerdDaemon) -> None:
    """Until the restarted CRI lists every image and has labelled what it will: it goes through
    its pinned_images while it starts (CheckImages), maybe after it answers. Waiting for the
    expected pins gives up quietly, so the tests' assertions say what differs."""
    cri.wait_for_refs(daemon.address, [*COVERED, UNCOVERED, TAGLESS_IMAGE])
    want = {*COVERED, daemon.sandbox_image}
    try:
        cri.wait_for(daemon.address, lambda listed: {t for i in listed if i.pinned for t in i.repo_tags} >= want, 10)
    except cri.CriError:
        pass


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exported]:
    """A containerd 2.1 with the policy's images, restarted with the exported table merged into
    its config (the harness's own, sandbox entry included)."""
    base = tmp_path_factory.mktemp("pinned-images")
    daemon = ContainerdDaemon(ENGINE, base / "daemon")
    try:
        daemon.start()
        images.ensure_sandbox_image(daemon)
    except (debs.EngineUnavailable, DaemonError, cri.CriError, OSError) as exc:
        daemon.stop()
        engine_unavailable(f"{ENGINE} unavailable: {exc}")
    try:
        infos = images.load_images(daemon, base / "archives", [
            *(images.recipe(ref, seed=ref) for ref in (*COVERED, UNCOVERED, TAGLESS_IMAGE))])
        policy = base / "pinctl.toml"
        policy.write_text("pinned_images = [\n" + "".join(f"  {json.dumps(p)},\n" for p in POLICY) + "]\n")
        result = pinctl(daemon, "config", "export", "--for", "containerd", "-n", "k8s.io",
                        env={"PINCTL_CONFIG": str(policy)})
        assert result.returncode == 0, result.stderr
        table = tomllib.loads(result.stdout)["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]
        daemon.pinned_images = {**table, TAGLESS_ENTRY[0]: TAGLESS_ENTRY[1]}
        daemon.restart()
        settle(daemon)
        yield Exported(daemon, policy, table, result.stderr, {ref: info.image_id for info in infos for ref in info.refs})
    finally:
        daemon.stop()


def test_the_exported_table_is_what_the_policy_means_for_containerd(exported: Exported) -> None:
    assert sorted(exported.table.values()) == sorted(COVERED)
    # Every entry a full name:tag: tagless ones pin nothing in containerd.
    assert all(":" in ref.rsplit("/", 1)[-1] for ref in exported.table.values())
    assert "example.test/pi/glob/*" in exported.notes and "expanded to the 2" in exported.notes


def test_containerd21_pins_exactly_the_policys_images(exported: Exported, crictl: pathlib.Path,
                                                      tmp_path: pathlib.Path) -> None:
    daemon = exported.daemon
    listed = Crictl(crictl, daemon.address, tmp_path / "crictl").images()
    pinned = {tag for image in listed if image.pinned for tag in image.repo_tags}
    assert pinned == {*COVERED, daemon.sandbox_image}
    # containerd issue 13314: an entry without a tag never matches the name the CRI stores.
    assert TAGLESS_IMAGE not in pinned and UNCOVERED not in pinned


def test_ls_names_the_entry_that_labels_each_image(exported: Exported) -> None:
    daemon = exported.daemon
    entry_of = {ref: name for name, ref in exported.table.items()}
    rows = {row["ref"]: row for row in pinctl_json(daemon, "ls", "-n", "k8s.io")["images"]}
    for ref in COVERED:
        where = f"pinned_images.{entry_of[ref]} in {daemon.config_path}"
        for name in (ref, exported.ids[ref]):
            row = rows[name]
            assert row["pinned"] is True and row["drift"] is None, row
            assert {"kind": "label", "detail": ref} in row["reasons"]
            assert {"kind": "containerd-config", "detail": where} in row["reasons"], row["reasons"]
    assert [r["kind"] for r in rows[TAGLESS_IMAGE]["reasons"]] == []
    sandbox = rows[daemon.sandbox_image]["reasons"]
    assert {"kind": "sandbox", "detail": daemon.sandbox_image} in sandbox
    assert "containerd-config" not in {r["kind"] for r in sandbox}
    table = pinctl(daemon, "ls", "-n", "k8s.io", "-o", "wide", COVERED[0]).stdout
    assert f"pinned_images.{entry_of[COVERED[0]]} in {daemon.config_path}" in table


def labelled(daemon: ContainerdDaemon, ref: str) -> bool:
    return {row.ref: row.labels for row in daemon.images()}[ref].get(PIN) == "pinned"


def within(seconds: float, condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_unpin_says_containerd_pins_it_again_and_containerd_does(exported: Exported) -> None:
    daemon = exported.daemon
    ref = "docker.io/library/pi-short:1"
    name = next(name for name, value in exported.table.items() if value == ref)
    result = pinctl(daemon, "unpin", "-n", "k8s.io", ref, "-o", "json")
    assert result.returncode == 0, result.stderr
    items = {item["ref"]: item for item in json.loads(result.stdout)["results"]}
    assert items[ref]["action"] == "unpinned"
    assert "containerd will pin it again" in items[ref]["warning"]
    assert f"pinned_images.{name} in {daemon.config_path}" in items[ref]["warning"]
    assert "warning" not in items[exported.ids[ref]]  # no entry names the sha256: reference
    assert f"pinctl: unpin {ref}: containerd will pin it again" in result.stderr
    # 2.x relabels a record its pinned_images names on every change to it, the unpin's own
    # write included (1.7 never relabels a record the label was taken from): the pin is back.
    assert within(5, lambda: labelled(daemon, ref)), daemon.images()
    assert cri.by_tag(cri.list_images(daemon.address))[ref].pinned

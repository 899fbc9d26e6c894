"""containerd 2.x's own pinned_images, for real on containerd 2.1 and 2.4.2: `config export --for
containerd` written into its config (2.1) or saved as the drop-in it names (2.4.2, whose version 4
file imports conf.d/*.toml) makes its CRI pin exactly the policy's images; ls names the entry that
labels an image; unpin says containerd puts the pin back, which it does at once. The export
fits the containerd asked and its config file: 2.1 with a version 2 file gets a version 2 table
(which pins there too), and 1.7, which has no pinned_images, is refused with pinctl sync as the
fix (and --offline, not knowing, writes what 1.7 starts with and ignores, and says so).

One containerd of this module's own per release, since its config changes and it restarts; the policy's
images are loaded before the export, which expands the glob and keyword over what is present.
What the kubelet would be told is read back with crictl.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from tests.conftest import engine_unavailable
from tests.harness import cri, debs, images
from tests.harness.containerd import ContainerdDaemon, DaemonError
from tests.harness.crictl import Crictl
from tests.integration.pinctl_runner import assert_one_line_error, pinctl, pinctl_json

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

pytestmark = pytest.mark.integration

PIN = "io.cri-containerd.pinned"
ENGINES = {"containerd-2.1": "ctd21", "containerd-2.4": "ctd24"}
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
    text: str  # what export wrote on stdout
    file: pathlib.Path  # where the exported entries are: the main file, or the drop-in


def header(text: str) -> str:
    """An export's comment lines as one text."""
    return " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))


def settle(daemon: ContainerdDaemon) -> None:
    """Until the restarted CRI lists every image and has labelled what it will: it goes through
    its pinned_images while it starts (CheckImages), maybe after it answers. Waiting for the
    expected pins gives up quietly, so the tests' assertions say what differs."""
    cri.wait_for_refs(daemon.address, [*COVERED, UNCOVERED, TAGLESS_IMAGE])
    want = {*COVERED, daemon.sandbox_image}
    try:
        cri.wait_for(daemon.address, lambda listed: {t for i in listed if i.pinned for t in i.repo_tags} >= want, 60)
    except cri.CriError:
        pass


@pytest.fixture(scope="module", params=list(ENGINES), ids=list(ENGINES.values()))
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exported]:
    """A containerd 2.x with the policy's images, restarted with the exported table merged into
    its config (the harness's own, sandbox entry included) or, where that imports conf.d, saved
    there as the drop-in export names."""
    engine: str = request.param
    base = tmp_path_factory.mktemp("pinned-images")
    daemon = ContainerdDaemon(engine, base / "daemon")
    try:
        daemon.start()
        images.ensure_sandbox_image(daemon)
    except (debs.EngineUnavailable, DaemonError, cri.CriError, OSError) as exc:
        daemon.stop()
        engine_unavailable(f"{engine} unavailable: {exc}")
    try:
        infos = images.load_images(daemon, base / "archives", [
            *(images.recipe(ref, seed=ref) for ref in (*COVERED, UNCOVERED, TAGLESS_IMAGE))])
        policy = base / "pinctl.toml"
        policy.write_text("pinned_images = [\n" + "".join(f"  {json.dumps(p)},\n" for p in POLICY) + "]\n")
        result = pinctl(daemon, "config", "export", "--for", "containerd", "-n", "k8s.io",
                        env={"PINCTL_CONFIG": str(policy)})
        assert result.returncode == 0, result.stderr
        table = tomllib.loads(result.stdout)["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]
        if daemon.config_version >= 4:
            file = daemon.conf_d / "99-pinctl.toml"
            file.write_text(result.stdout)
            daemon.pinned_images = {TAGLESS_ENTRY[0]: TAGLESS_ENTRY[1]}
        else:
            file = daemon.config_path
            daemon.pinned_images = {**table, TAGLESS_ENTRY[0]: TAGLESS_ENTRY[1]}
        daemon.restart()
        settle(daemon)
        yield Exported(daemon, policy, table, result.stderr, {ref: info.image_id for info in infos for ref in info.refs},
                       result.stdout, file)
    finally:
        daemon.stop()


def test_the_exported_table_is_what_the_policy_means_for_containerd(exported: Exported) -> None:
    assert sorted(exported.table.values()) == sorted(COVERED)
    # The header is for the containerd asked and names the configured containerd_config, or the
    # drop-in for the directory it imports.
    said, daemon = header(exported.text), exported.daemon
    assert said.startswith(f"containerd v{daemon.version}" if daemon.config_version >= 4 else "containerd 2.1."), said
    assert f"CRI config (version {daemon.config_version})" in said, said
    if daemon.config_version >= 4:
        assert f"Save it as {exported.file}: {daemon.config_path} imports" in said, said
        assert f"save it as {exported.file}" in exported.notes
    else:
        assert f"Merge the table into {daemon.config_path};" in said
    assert "/etc/containerd" not in said
    assert "1.x" not in said and "containerd's version" not in exported.notes
    # Every entry a full name:tag: tagless ones pin nothing in containerd.
    assert all(":" in ref.rsplit("/", 1)[-1] for ref in exported.table.values())
    assert "example.test/pi/glob/*" in exported.notes and "expanded to the 2" in exported.notes


def test_containerd_pins_exactly_the_policys_images(exported: Exported, crictl: pathlib.Path,
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
    lines = exported.file.read_text().splitlines()
    for ref in COVERED:
        line = next(n for n, text in enumerate(lines, 1) if text.strip() == f"{json.dumps(entry_of[ref])} = {json.dumps(ref)}")
        where = f"pinned_images.{entry_of[ref]} in {exported.file}:{line}"
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
    assert f"pinned_images.{entry_of[COVERED[0]]} in {exported.file}" in table


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
    assert f"pinned_images.{name} in {exported.file}" in items[ref]["warning"]
    assert "warning" not in items[exported.ids[ref]]  # no entry names the sha256: reference
    assert f"pinctl: unpin {ref}: containerd will pin it again" in result.stderr
    # 2.x relabels a record its pinned_images names on every change to it, the unpin's own
    # write included (1.7 never relabels a record the label was taken from): the pin is back.
    assert within(5, lambda: labelled(daemon, ref)), daemon.images()
    assert cri.by_tag(cri.list_images(daemon.address))[ref].pinned


# -- the export fits the containerd and its config file --------------------------------------------

APP, OTHER = "example.test/pi/v2/app:1", "example.test/pi/v2/other:1"


class Version2Daemon(ContainerdDaemon):
    """A containerd whose config is version 2 (what 1.x reads, and 2.x still), with what an
    export wrote merged in as an operator would: its tables appended."""

    merged = ""

    def render_config(self) -> str:
        return self._render_v2() + self.merged


def own_version2(engine: str, base: pathlib.Path) -> Version2Daemon:
    daemon = Version2Daemon(engine, base / "daemon")
    try:
        daemon.start()
        images.ensure_sandbox_image(daemon)
        images.load_images(daemon, base / "archives", [images.recipe(ref, seed=ref) for ref in (APP, OTHER)])
    except (debs.EngineUnavailable, DaemonError, cri.CriError, OSError) as exc:
        daemon.stop()
        engine_unavailable(f"{engine} unavailable: {exc}")
    return daemon


def app_policy(base: pathlib.Path) -> dict[str, str]:
    policy = base / "pinctl.toml"
    policy.write_text(f'pinned_images = ["{APP}"]\n')
    return {"PINCTL_CONFIG": str(policy)}


def merge(daemon: Version2Daemon, exported: str) -> None:
    """The export's tables into the daemon's version 2 file (its own `version = 2` is the file's)."""
    assert tomllib.loads(exported)["version"] == 2
    daemon.merged = "\n" + exported[exported.index("[plugins."):]
    daemon.restart()


@pytest.mark.parametrize("engine", list(ENGINES), ids=list(ENGINES.values()))
def test_containerd2x_with_a_version_2_file_gets_a_version_2_table_that_pins(engine: str, tmp_path: pathlib.Path) -> None:
    daemon = own_version2(engine, tmp_path)
    try:
        result = pinctl(daemon, "config", "export", "--for", "containerd", env=app_policy(tmp_path))
        assert result.returncode == 0, result.stderr
        said = header(result.stdout)
        assert said.startswith(("containerd 2.1.", "containerd v2.4.2")) and "(version 2)" in said, said
        assert f"Merge the table into {daemon.config_path}, which is version 2" in said and "1.x" not in said
        merge(daemon, result.stdout)
        listed = cri.wait_for(daemon.address, lambda found: APP in {t for i in found if i.pinned for t in i.repo_tags},
                              timeout=60)
        pinned = {tag for image in listed if image.pinned for tag in image.repo_tags}
        # The version 2 file's sandbox_image stays pinned beside the table's entry.
        assert pinned == {APP, daemon.sandbox_image}, listed
    finally:
        daemon.stop()


def test_containerd17_is_refused_in_one_line_with_pinctl_sync_as_the_fix(containerd17: ContainerdDaemon,
                                                                          tmp_path: pathlib.Path) -> None:
    result = pinctl(containerd17, "config", "export", "--for", "containerd", env=app_policy(tmp_path))
    assert_one_line_error(result, 2, "containerd 1.7.", f"at {containerd17.address} has no pinned_images",
                          "came with containerd 2.0", "run pinctl sync")
    assert result.stdout == ""


def test_containerd17_refuses_to_start_on_the_version_3_config_export_used_to_write(tmp_path: pathlib.Path) -> None:
    """Why 1.x is refused rather than given a table: merged as before (version = 3), it stops
    containerd 1.7 from starting at all."""
    try:
        binary = debs.engine_dir("containerd-1.7") / "usr" / "bin" / "containerd"
    except debs.EngineUnavailable as exc:
        engine_unavailable(f"containerd-1.7 unavailable: {exc}")
    config = tmp_path / "containerd.toml"
    config.write_text("version = 3\n" f'root = "{tmp_path}/root"\nstate = "{tmp_path}/state"\n'
                      f'[grpc]\n  address = "{tmp_path}/c.sock"\n')
    done = subprocess.run([str(binary), "--config", str(config)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "unsupported config version `3`" in done.stderr, done.stderr


def test_offline_a_version_2_file_gets_a_table_containerd17_starts_with_and_ignores(tmp_path: pathlib.Path) -> None:
    daemon = own_version2("containerd-1.7", tmp_path)
    try:
        result = pinctl(daemon, "config", "export", "--for", "containerd", "--offline", env=app_policy(tmp_path))
        assert result.returncode == 0, result.stderr
        said = header(result.stdout)
        assert "containerd 1.x has no pinned_images and ignores this table" in said, said
        assert f"{daemon.config_path} is version 2" in result.stderr and "on 1.x run pinctl sync" in result.stderr
        merge(daemon, result.stdout)
        listed = cri.by_tag(cri.wait_for_refs(daemon.address, [APP, OTHER]))
        # 1.7 started with the table and pins neither image by it: no label was written, and its
        # CRI reports pins by label only.
        assert not listed[APP].pinned and not listed[OTHER].pinned
        assert PIN not in {row.ref: row.labels for row in daemon.images()}[APP]
    finally:
        daemon.stop()

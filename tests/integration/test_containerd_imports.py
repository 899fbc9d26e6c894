"""containerd 2.x's `imports`, for real on 2.1 and 2.4.2: a conf.d file's pinned_images entry joins the main file's
(tables merge key by key: containerd pins both, and an import that sets another key of the images
plugin takes none away); pinctl ls names the imported file and line as the entry's place, unpin
warns naming it, config lint lists a tagless entry there with the entry that would work; and a
missing import stops containerd from starting, which pinctl says in one line naming the file.

One containerd of this module's own per release, started on a config that imports conf.d/*.toml.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
from collections.abc import Iterator

import pytest

from tests.conftest import engine_unavailable
from tests.harness import cri, debs
from tests.harness.containerd import ContainerdDaemon, engine_bin_dir
from tests.harness.crictl import Crictl
from tests.integration.conftest import started_with
from tests.integration.pinctl_runner import assert_one_line_error, pinctl, pinctl_json

pytestmark = pytest.mark.integration

ENGINES = {"containerd-2.1": "ctd21", "containerd-2.4": "ctd24"}
PINNED = "[plugins.'io.containerd.cri.v1.images'.pinned_images]"
MAIN_IMAGE = "example.test/ci/main:1"  # an entry of the main file
SITE_IMAGE = "example.test/ci/site:1"  # an entry of conf.d/10-site.toml
TAGLESS = "example.test/ci/tagless"  # an entry of conf.d/10-site.toml that pins nothing
TAGLESS_IMAGE = TAGLESS + ":latest"
OTHER = "example.test/ci/other:1"  # named by no entry
SITE_TEXT = f"version = 3\n\n{PINNED}\n  site = '{SITE_IMAGE}'\n  tools = '{TAGLESS}'\n"
SITE_LINE, TAGLESS_LINE = 4, 5


class ImportingDaemon(ContainerdDaemon):
    """The harness's containerd 2.x whose main file imports conf.d/*.toml (as `containerd config
    default` has it) and names one entry of its own beside the sandbox. 2.4's version 4 file
    imports it already."""

    def render_config(self) -> str:
        text = super().render_config()
        if self.config_version >= 4:
            return text
        head, _, rest = text.partition("\n")
        assert head == "version = 3", head
        return f"{head}\nimports = ['conf.d/*.toml']\n{rest}"


@pytest.fixture(scope="module", params=list(ENGINES), ids=list(ENGINES.values()))
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ImportingDaemon]:
    engine: str = request.param
    base = tmp_path_factory.mktemp("ctd-imports")
    found = ImportingDaemon(engine, base / "daemon")
    found.pinned_images = {"main": MAIN_IMAGE}
    conf_d = found.base_dir / "conf.d"
    conf_d.mkdir(parents=True, exist_ok=True)
    (conf_d / "10-site.toml").write_text(SITE_TEXT)
    # Another key of the images plugin and no pinned_images: replacing the plugin's table would
    # drop the main file's entries (sandbox, main); containerd 2.1 merges it key by key.
    (conf_d / "20-tuning.toml").write_text("version = 3\n[plugins.'io.containerd.cri.v1.images']\n"
                                           "  max_concurrent_downloads = 2\n")
    yield from started_with(found, base / "archives", [MAIN_IMAGE, SITE_IMAGE, TAGLESS_IMAGE, OTHER])


def site_file(daemon: ContainerdDaemon) -> str:
    return str(daemon.base_dir / "conf.d" / "10-site.toml")


def pinned_tags(daemon: ContainerdDaemon, want: set[str]) -> set[str]:
    """The CRI's pinned images once it has labelled what it will (want), or as they are when it
    never does, so the assertion says what differs."""
    def tags(listed: list[cri.CriImage]) -> set[str]:
        return {tag for image in listed if image.pinned for tag in image.repo_tags}
    try:
        return tags(cri.wait_for(daemon.address, lambda listed: tags(listed) >= want))
    except cri.CriError:
        return tags(cri.list_images(daemon.address))


def test_containerd_pins_the_imported_entry_beside_the_main_files(daemon: ImportingDaemon, crictl: pathlib.Path,
                                                                   tmp_path: pathlib.Path) -> None:
    want = {MAIN_IMAGE, SITE_IMAGE, daemon.sandbox_image}
    assert pinned_tags(daemon, want) == want
    listed = Crictl(crictl, daemon.address, tmp_path / "crictl").images()
    # The tagless entry pins nothing (containerd issue 13314), and nothing names the other.
    assert {tag for image in listed if image.pinned for tag in image.repo_tags} == want


def test_ls_names_the_imported_file_and_line(daemon: ImportingDaemon) -> None:
    pinned_tags(daemon, {SITE_IMAGE})
    rows = {row["ref"]: row for row in pinctl_json(daemon, "ls", "-n", "k8s.io")["images"]}
    site = {"kind": "containerd-config", "detail": f"pinned_images.site in {site_file(daemon)}:{SITE_LINE}"}
    assert site in rows[SITE_IMAGE]["reasons"], rows[SITE_IMAGE]["reasons"]
    main = [r for r in rows[MAIN_IMAGE]["reasons"] if r["kind"] == "containerd-config"]
    assert main and main[0]["detail"].startswith(f"pinned_images.main in {daemon.config_path}:"), main
    assert [r["kind"] for r in rows[TAGLESS_IMAGE]["reasons"]] == []


def empty_policy(directory: pathlib.Path) -> dict[str, str]:
    policy = directory / "pinctl.toml"
    policy.write_text("pinned_images = []\n")
    return {"PINCTL_CONFIG": str(policy)}


def test_lint_lists_the_tagless_entry_in_the_imported_file(daemon: ImportingDaemon, tmp_path: pathlib.Path) -> None:
    result = pinctl(daemon, "config", "lint", "--offline", "-o", "json", env=empty_policy(tmp_path))
    assert result.returncode == 1, result.stderr
    problems = json.loads(result.stdout)["problems"]
    assert [(p["kind"], p["pattern"], p["source"]) for p in problems] == [
        ("containerd-entry", TAGLESS, f"{site_file(daemon)}:{TAGLESS_LINE}")]
    assert repr(TAGLESS_IMAGE) in problems[0]["message"]


def test_unpin_warns_naming_the_imported_file(daemon: ImportingDaemon) -> None:
    pinned_tags(daemon, {SITE_IMAGE})
    result = pinctl(daemon, "unpin", "-n", "k8s.io", SITE_IMAGE, "-o", "json")
    assert result.returncode == 0, result.stderr
    items = {item["ref"]: item for item in json.loads(result.stdout)["results"]}
    warning = items[SITE_IMAGE]["warning"]
    assert "containerd will pin it again" in warning
    assert f"pinned_images.site in {site_file(daemon)}:{SITE_LINE}" in warning, warning
    # And containerd does: it relabels a record its pinned_images names whenever it changes.
    assert pinned_tags(daemon, {SITE_IMAGE}) >= {SITE_IMAGE}


@pytest.mark.parametrize("engine", list(ENGINES), ids=list(ENGINES.values()))
def test_a_missing_import_stops_containerd_and_pinctl_names_it(engine: str, tmp_path: pathlib.Path) -> None:
    try:
        binary = engine_bin_dir(engine) / "containerd"
    except debs.EngineUnavailable as exc:
        engine_unavailable(f"{engine} unavailable: {exc}")
    config = tmp_path / "containerd.toml"
    config.write_text("version = 3\nimports = ['conf.d/gone.toml']\n"
                      f'root = "{tmp_path}/root"\nstate = "{tmp_path}/state"\n[grpc]\n  address = "{tmp_path}/c.sock"\n')
    gone = tmp_path / "conf.d" / "gone.toml"
    done = subprocess.run([str(binary), "--config", str(config)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and f"open {gone}: no such file or directory" in done.stderr, done.stderr
    stand_in = ContainerdDaemon(engine, tmp_path / "unused")
    stand_in.config_path = config
    result = pinctl(stand_in, "config", "lint", "--offline", env=empty_policy(tmp_path))
    assert result.returncode == 1, result.stderr
    assert f"{gone} does not exist" in result.stdout and f"imported by {config}" in result.stdout, result.stdout


def test_check_names_the_tagless_entry_beside_the_image_it_meant(daemon: ImportingDaemon) -> None:
    pinned_tags(daemon, {SITE_IMAGE})
    result = pinctl(daemon, "check", "-o", "json")
    assert result.returncode == 1, result.stdout
    items = {tuple(item["refs"]): item for item in json.loads(result.stdout)["images"]}
    meant = next(item for refs, item in items.items() if TAGLESS_IMAGE in refs)
    assert meant["wanted"] and not meant["cri_pinned"] and not meant["agrees"], meant
    assert f"{site_file(daemon)}:{TAGLESS_LINE}" in meant["cause"] and "pins nothing" in meant["cause"], meant
    assert repr(TAGLESS_IMAGE) in meant["fix"], meant
    # The images its entries do pin agree, and an image no entry names is left alone.
    assert all(item["agrees"] for refs, item in items.items() if TAGLESS_IMAGE not in refs), items

"""Where containerd's releases read the same files differently, pinctl asks the daemon its version.

A version 2 main file (its sandbox image as `sandbox_image`) importing a version 3 drop-in: 2.0
to 2.2 merge the files first and migrate the merged result only when the last version declared
is below 3, so the main file's sandbox_image is lost and the pause image is not pinned; 2.3 and
later (2.4.2 here) migrate each file before merging and pin it. For each, pinctl ls says what
that containerd's CRI says of the pause image, and the drop-in's entry is pinned on both.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness import cri
from tests.harness.containerd import ContainerdDaemon
from tests.integration.conftest import started_with
from tests.integration.pinctl_runner import pinctl_json

pytestmark = pytest.mark.integration

PINNED = "[plugins.'io.containerd.cri.v1.images'.pinned_images]"
SITE_IMAGE = "example.test/rules/site:1"
# The release -> whether its CRI pins the version 2 main file's sandbox_image.
KEEPS_SANDBOX = {"containerd-2.1": False, "containerd-2.4": True}


class Version2Main(ContainerdDaemon):
    """A containerd 2.x started on a version 2 main file (as 1.x's) that imports conf.d/*.toml."""

    def render_config(self) -> str:
        head, _, rest = self._render_v2().partition("\n")
        assert head == "version = 2", head
        return f"{head}\nimports = ['conf.d/*.toml']\n{rest}"


@pytest.fixture(params=list(KEEPS_SANDBOX), ids=["ctd21", "ctd24"])
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Version2Main]:
    engine: str = request.param
    base = tmp_path_factory.mktemp("ctd-rules")
    found = Version2Main(engine, base / "daemon")
    conf_d = found.base_dir / "conf.d"
    conf_d.mkdir(parents=True, exist_ok=True)
    (conf_d / "10-site.toml").write_text(f"version = 3\n\n{PINNED}\n  site = '{SITE_IMAGE}'\n")
    yield from started_with(found, base / "archives", [SITE_IMAGE])


def test_the_sandbox_image_is_read_as_this_release_merges(daemon: Version2Main) -> None:
    keeps = KEEPS_SANDBOX[daemon.engine]
    listed = cri.wait_for(daemon.address, lambda got: any(SITE_IMAGE in i.repo_tags and i.pinned for i in got))
    cri_says = next(i.pinned for i in listed if daemon.sandbox_image in i.repo_tags)
    assert cri_says is keeps, (daemon.engine, cri_says)
    rows = {row["ref"]: row for row in pinctl_json(daemon, "ls", "-n", "k8s.io")["images"]}
    sandbox = rows[daemon.sandbox_image]
    assert sandbox["pinned"] is keeps, sandbox
    kinds = [reason["kind"] for reason in sandbox["reasons"]]
    assert ("sandbox" in kinds) is keeps, sandbox
    assert rows[SITE_IMAGE]["pinned"] is True, rows[SITE_IMAGE]

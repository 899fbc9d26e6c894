"""containerd 2.x pinned_images entries that pin nothing (containerd issue 13314: containerd
compares an entry's text with the record's name exactly), and config lint listing them at their
file and line with the entry that would work."""

from __future__ import annotations

import io
import json
import pathlib

import pytest

from pinctl.commands.config import lint
from pinctl.config.containerd import read_config_pins
from pinctl.model import ConfigPin
from pinctl.pins.containerd_entries import dead_entries
from pinctl.pins.lint import PROBLEM_CONTAINERD_ENTRY, containerd_entries
from pinctl.refs import DEFAULT_DOMAIN
from pinctl.render import output

DIGEST = "sha256:" + "a" * 64
D = DEFAULT_DOMAIN


@pytest.mark.parametrize("ref, fix, reason", [
    ("local.test/team/tools", "local.test/team/tools:latest", "no tag"),
    ("example.test:5000/tools", "example.test:5000/tools:latest", "no tag"),
    ("nginx:1.27", f"{D}/library/nginx:1.27", f"names the image {D}/library/nginx:1.27"),
    ("library/nginx:1", f"{D}/library/nginx:1", "as written"),
    ("nginx", f"{D}/library/nginx:latest", "no tag"),
    (f"example.test/a:1@{DIGEST}", f"example.test/a@{DIGEST}", "both a tag and a digest"),
    ("Not A Ref", None, "no image reference"),
])
def test_an_entry_no_record_can_equal_gets_its_reason_and_the_entry_that_works(ref: str, fix: str | None,
                                                                                reason: str) -> None:
    pin = ConfigPin("e", ref, "/etc/containerd/conf.d/site.toml", 4)
    [dead] = dead_entries([pin])
    assert dead.pin == pin and dead.fix == fix and reason in dead.reason
    assert (f"write {fix!r} instead" if fix else "remove it") in dead.message


@pytest.mark.parametrize("ref", ["example.test/a:1", f"example.test/a@{DIGEST}", f"{D}/library/nginx:1.27"])
def test_a_full_name_is_fine(ref: str) -> None:
    assert dead_entries([ConfigPin("e", ref, "/f")]) == []


def test_lint_lists_them_at_file_and_line(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    main.write_text("version = 3\nimports = ['conf.d/*.toml']\n")
    site = tmp_path / "conf.d" / "site.toml"
    site.parent.mkdir()
    site.write_text("version = 3\n[plugins.'io.containerd.cri.v1.images'.pinned_images]\n"
                    "  good = 'example.test/a:1'\n  tools = 'local.test/team/tools'\n")
    report = lint([], None, lambda: read_config_pins(str(main)))
    assert report.exit_code == 1
    [problem] = report.problems
    assert (problem.kind, problem.pattern, problem.source) == (PROBLEM_CONTAINERD_ENTRY, "local.test/team/tools",
                                                               f"{site}:4")
    assert "'local.test/team/tools:latest'" in problem.message
    out = io.StringIO()
    output.print_problems(report.problems, "table", out)
    assert out.getvalue().startswith(f"{site}:4: containerd-entry: pinned_images.tools = 'local.test/team/tools' pins nothing")
    out = io.StringIO()
    output.print_problems(report.problems, "json", out)
    assert json.loads(out.getvalue())["problems"][0]["source"] == f"{site}:4"


def test_an_unreadable_containerd_config_is_one_problem() -> None:
    from pinctl.errors import ConfigError

    def broken() -> list[ConfigPin]:
        raise ConfigError("containerd config /x is not valid TOML: bad", "fix the file")

    [problem] = containerd_entries(broken)
    assert problem.kind == PROBLEM_CONTAINERD_ENTRY and "/x is not valid TOML" in problem.message

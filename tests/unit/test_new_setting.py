"""Adding a setting is one attribute of Settings: a table with more keys gets their options, their
help, their entries in pinctl.conf(5), their rows in docs/configuration.md's tables and their lines in config
show, with nothing else written for them."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any, Callable

import click
import pytest
from click.testing import CliRunner

from pinctl.cli import SOURCE_OPTIONS, PinctlCommand, cli, setting_options
from pinctl.cli.root import write_common_options
from pinctl.config.loader import Config
from pinctl.config.settings import KEYS, Settings, key_table, setting
from pinctl.render import output
from tools import manpages, settings_doc

SETTINGS_DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


@dataclasses.dataclass(frozen=True)
class More(Settings):
    max_age: float = setting(600.0, help="Seconds an unused image is kept.", example=900.0, env="PINCTL_MAX_AGE",
                             flag="--max-age", short="-m", metavar="SECONDS", bounds=(1.0, 86400.0))
    keep_labels: tuple[str, ...] = setting((), help="Labels that keep an image.", example=("team.example/keep",),
                                           env="PINCTL_KEEP_LABELS", flag="--keep-label", metavar="LABEL",
                                           env_split=True, default_text="none")
    gc_mode: str = setting("soft", help="How hard to collect.", example="hard")


MORE = key_table(More)


def probe_command() -> click.Command:
    """A command with the common options a table with the extra keys gives."""

    def probe(**params: Any) -> None:
        click.echo(json.dumps(params))

    func: Callable[..., Any] = probe
    for option in reversed([*setting_options(MORE), *SOURCE_OPTIONS]):
        func = option(func)
    return click.command("probe", cls=PinctlCommand)(func)


def invoke(*args: str) -> click.testing.Result:
    return CliRunner().invoke(probe_command(), list(args))


def test_the_new_keys_follow_the_old_ones() -> None:
    assert list(MORE) == [*KEYS, "max_age", "keep_labels", "gc_mode"]
    assert (MORE["max_age"].type, MORE["keep_labels"].type, MORE["gc_mode"].type) == ("number", "list", "str")


def test_a_new_key_with_a_flag_is_an_option_named_after_it() -> None:
    result = invoke("-m", "30", "--keep-label", "a", "--keep-label", "b")
    assert result.exit_code == 0, result.output
    params = json.loads(result.output)
    assert params["max_age"] == 30.0 and params["keep_labels"] == ["a", "b"]
    assert "gc_mode" not in params  # no flag, no option


def test_a_new_bounded_key_is_checked_when_parsed() -> None:
    result = invoke("--max-age", "0.5")
    assert result.exit_code == 2
    assert "0.5 is out of range; give 1 to 86400 seconds" in result.output


def test_a_new_key_has_its_help_generated() -> None:
    # Listed where pinctl options lists the common ones; a command's --help only points there.
    command = probe_command()
    ctx = click.Context(command, info_name="probe")
    formatter = ctx.make_formatter()
    write_common_options(command, ctx, formatter)
    text = " ".join(formatter.getvalue().split())
    assert "--max-age" not in invoke("--help").output
    assert ("-m, --max-age SECONDS Seconds an unused image is kept (1 to 86400). "
            "Default: $PINCTL_MAX_AGE, config 'max_age', else 600.") in text
    assert "--keep-label LABEL Labels that keep an image. Default: $PINCTL_KEEP_LABELS, config 'keep_labels', else none." in text


def test_a_new_key_is_in_the_config_page() -> None:
    page = manpages.render_config(probe_command(), MORE)
    plain = page.replace("\\-", "-").replace("\\fB", "").replace("\\fR", "")
    for needle in ("\nmax_age\nSeconds an unused image is kept.", "Type: number from 1 to 86400", "Default: 600",
                   "Environment: PINCTL_MAX_AGE", "Flag: -m, --max-age", "max_age = 900",
                   "\nkeep_labels\n", "Environment: PINCTL_KEEP_LABELS, comma-separated", "Flag: --keep-label (repeatable)",
                   "\ngc_mode\nHow hard to collect.", 'gc_mode = "hard"', "PINCTL_MAX_AGE\nSets max_age; a flag overrides it."):
        assert needle in plain, needle


def test_a_new_key_is_in_both_settings_tables() -> None:
    regions = settings_doc.tables(probe_command(), MORE)
    options = regions["common-options"].splitlines()
    assert "| `-m`, `--max-age SECONDS` (1 to 86400) | `PINCTL_MAX_AGE` | `max_age` | `600` |" in options
    assert "| `--keep-label LABEL` (repeatable) | `PINCTL_KEEP_LABELS` (comma-separated) | `keep_labels` | none |" in options
    assert not any("gc_mode" in row for row in options)
    keys = regions["config-keys"].splitlines()
    assert "| `max_age` | number from 1 to 86400 | `600` | `PINCTL_MAX_AGE` | `-m`, `--max-age` |" in keys
    assert '| `gc_mode` | string | `soft` |  |  |' in keys


def test_a_new_key_is_in_config_show() -> None:
    cfg = Config(More(max_age=30.0), {"max_age": "flag", "gc_mode": "default"}, [], [])
    buf = io.StringIO()
    output.print_config(cfg, "json", out=buf)
    assert json.loads(buf.getvalue())["config"] == {"gc_mode": {"source": "default", "value": "soft"},
                                                     "max_age": {"source": "flag", "value": 30.0}}


# -- docs/configuration.md's regions --------------------------------------------------------------------


def test_the_settings_doc_holds_the_tables_the_table_gives() -> None:
    text = SETTINGS_DOC.read_text(encoding="utf-8")
    assert settings_doc.fill(text, settings_doc.tables(cli, KEYS)) == text
    assert settings_doc.fill(text, settings_doc.tables(probe_command(), MORE)) != text


def test_filling_replaces_only_between_the_markers() -> None:
    text = ("before\n<!-- generated by tools/generate.py from src/pinctl/config/settings.py: config-keys -->\nold\n"
            "<!-- end of generated config-keys -->\nafter\n")
    filled = settings_doc.fill(text, {"config-keys": "| new |\n"})
    assert filled == text.replace("old\n", "| new |\n")
    assert settings_doc.fill(filled, {"config-keys": "| new |\n"}) == filled


def test_a_missing_region_is_named() -> None:
    with pytest.raises(ValueError, match="common-options"):
        settings_doc.fill("no markers here\n", {"common-options": "x\n"})

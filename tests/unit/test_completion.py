"""Completion scripts, man pages and docs/cli.md, as text: complete, deterministic, escaped.

Driving the real shells is in tests/integration/test_shells.py; here only `bash -n` and
shellcheck run (with CI=true a missing shellcheck fails rather than skips).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import click
import pytest

from pinctl import __version__, completion
from pinctl.cli import cli
from pinctl.completion import template
from pinctl.config.files import toml_reader
from pinctl.config.settings import KEYS
from tools import manpages

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = {"bash": "completions/bash/pinctl", "zsh": "completions/zsh/_pinctl", "fish": "completions/fish/pinctl.fish"}
SHELL_DATA = ROOT / "src" / "pinctl" / "completion" / "shell"
REQUIRED_SECTIONS = ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "ENVIRONMENT", "FILES", "SEE ALSO")


def tool_missing(reason: str) -> NoReturn:
    """Skip locally, fail in CI: a skipped linter there would pass what it should check."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def all_option_names(root: click.Command) -> set[str]:
    return {
        name
        for ctx in completion.tree.contexts(root)
        for param in ctx.command.get_params(ctx)
        if isinstance(param, click.Option)
        for name in (*param.opts, *param.secondary_opts)
    }


def command_paths(root: click.Command) -> list[tuple[str, ...]]:
    return [completion.tree.command_path(ctx) for ctx in completion.tree.contexts(root)]


# -- the scripts -----------------------------------------------------------------------------


@pytest.mark.parametrize("shell", completion.SHELLS)
def test_committed_script_is_what_pinctl_completion_prints(shell: str) -> None:
    printed = subprocess.run([sys.executable, "-m", "pinctl", "completion", shell], capture_output=True, text=True,
                             check=True).stdout
    assert printed == (ROOT / COMMITTED[shell]).read_text()
    assert printed == completion.render(shell, cli)


@pytest.mark.parametrize("shell", completion.SHELLS)
def test_script_names_every_command_option_and_choice(shell: str) -> None:
    script = completion.render(shell, cli)
    for path in command_paths(cli)[1:]:
        assert re.search(rf"(?<![\w-]){re.escape(path[-1])}(?![\w-])", script), path
    for name in all_option_names(cli):
        # fish spells --name as -l name and -n as -s n.
        spelled = {"fish": f"-l {name[2:]}" if name.startswith("--") else f"-s {name[1:]}"}.get(shell, name)
        assert spelled in script, (shell, name)
    for choice in ("table", "wide", "json", "crio", "cri-dockerd", "bash", "zsh", "fish"):
        assert choice in script


@pytest.mark.parametrize("shell", completion.SHELLS)
def test_script_is_deterministic_and_versioned(shell: str) -> None:
    script = completion.render(shell, cli)
    assert script == completion.render(shell, cli)
    assert f"pinctl {__version__}" in "\n".join(script.splitlines()[:3])


@pytest.mark.parametrize("shell", completion.SHELLS)
def test_dynamic_parts_ask_pinctl_quietly(shell: str) -> None:
    script = completion.render(shell, cli)
    assert " ".join(completion.calls.REFS_CALL) in script and " ".join(completion.calls.NAMESPACES_CALL) in script
    assert " ".join(completion.calls.PINNED_REFS_CALL) in script
    assert "2>/dev/null </dev/null" in script


def test_only_unpin_completes_pinned_refs() -> None:
    kinds = {node.key: [arg.value.kind for arg in node.args] for node in completion.tree.tree(cli).walk()}
    assert kinds["pinctl unpin"] == ["pinned-refs"]
    assert kinds["pinctl pin"] == ["refs"] and kinds["pinctl ls"] == ["refs"]
    assert [key for key, found in kinds.items() if "pinned-refs" in found] == ["pinctl unpin"]


def test_history_completes_the_names_the_journal_holds() -> None:
    kinds = {node.key: [arg.value.kind for arg in node.args] for node in completion.tree.tree(cli).walk()}
    assert [key for key, found in kinds.items() if "deleted-refs" in found] == ["pinctl history"]
    for shell in completion.SHELLS:
        assert " ".join(completion.calls.DELETED_REFS_CALL) in completion.render(shell, cli)


@pytest.mark.parametrize("shell", completion.SHELLS)
def test_short_engine_options_are_passed_on_by_their_long_name(shell: str) -> None:
    # pinctl reads "-a=/x" as the socket "=/x": every typed name must reach it as --address=.
    script = completion.render(shell, cli)
    assert "-a=" not in script and '"$1=$value"' not in script and '"$word=' not in script
    assert "--address=" in script


@pytest.mark.parametrize("shell", completion.SHELLS)
def test_every_shell_passes_on_the_options_decided_once(shell: str) -> None:
    passed = {p.long for p in completion.calls.passed_on(completion.tree.tree(cli))}
    assert {"--address", "--namespace"} <= passed and "--runtime-endpoint" not in passed
    script = completion.render(shell, cli)
    # bash and zsh: pass+=("--address=..."); fish: set -a pass "--address=..."
    written = set(re.findall(r'(?:pass\+=\(|set -a pass )"(--[\w-]+)=', script))
    assert written == passed


def test_template_fills_every_placeholder_once() -> None:
    text = "case $1 in\n    # @ARMS@\nesac\nrun @CALL@\n"
    filled = template.fill(text, {"ARMS": ["a) x ;;", "", "b) y ;;"]}, {"CALL": "ls -q"})
    assert filled == "case $1 in\n    a) x ;;\n\n    b) y ;;\nesac\nrun ls -q\n"
    with pytest.raises(ValueError, match="CALL"):
        template.fill(text, {"ARMS": []}, {})
    with pytest.raises(ValueError, match="EXTRA"):
        template.fill(text, {"ARMS": [], "EXTRA": []}, {"CALL": ""})
    assert template.fill("@A@ @B@", {}, {"A": "@B@", "B": "b"}) == "@B@ b"  # filled text is not searched again


def test_zsh_has_compdef_header_and_descriptions() -> None:
    script = completion.render("zsh", cli)
    assert script.startswith("#compdef pinctl\n")
    assert "_arguments" in script and "_describe" in script
    assert "'ls:List image references, whether each is pinned and why'" in script
    assert "compdef _pinctl pinctl" in script  # for source <(pinctl completion zsh)


def test_fish_lines_use_seen_subcommand_conditions() -> None:
    script = completion.render("fish", cli)
    assert "complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show'" in script
    assert re.search(r"complete -c pinctl -n 'not __fish_seen_subcommand_from [a-z -]*pin[a-z -]*' -a pin -d ", script)
    assert "-a '(__fish_pinctl_refs)'" in script and "-a '(__fish_pinctl_namespaces)'" in script


def test_bash_registers_a_function_and_parses() -> None:
    script = completion.render("bash", cli)
    assert script.rstrip().endswith("complete -F _pinctl pinctl")
    result = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# -- shellcheck over the bash script ---------------------------------------------------------
# shellcheck reads sh, bash, dash and ksh only, so the zsh and fish scripts have no linter here;
# tests/integration/test_shells.py runs all three in the real shells.

# Findings that are right as they stand: (code, the line's text) with why. Anything else fails.
MEANT_FINDINGS = [
    # A list of names, split into words on purpose; tree._check_word lets no glob character in.
    ("SC2086", r'_pinctl_add "\$cur" \$(opts|subs)'),
    # An argument's index after the closing quote, like the '*' of 'pinctl ls|#'* for many.
    ("SC2026", r"'[^']*\|#'[0-9]+\)"),
]
# nspass is read only by the _pinctl_value arms that the renderer splices in.
MEANT_IN_DATA_FILE_ONLY = [("SC2034", r"local -a words pass=\(\) nspass=\(\)")]


def shellcheck(path: Path) -> list[tuple[str, str]]:
    """(code, the line's text) for each finding of shellcheck on the bash script at path."""
    found = shutil.which("shellcheck")
    if found is None:
        tool_missing("shellcheck is not installed (it is in scripts/test-packages.txt)")
    result = subprocess.run([found, "--shell=bash", "--format=json1", str(path)], capture_output=True, text=True)
    assert result.returncode in (0, 1) and not result.stderr, result.stderr  # 1: findings, listed below
    lines = path.read_text().splitlines()
    return [(f"SC{c['code']}", lines[c["line"] - 1].strip()) for c in json.loads(result.stdout)["comments"]]


def unmeant(findings: list[tuple[str, str]], meant: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(code, line) for code, line in findings if not any(
        code == meant_code and re.fullmatch(pattern, line) for meant_code, pattern in meant)]


def test_bash_data_file_passes_shellcheck() -> None:
    data_files = sorted(SHELL_DATA.glob("*.bash"))
    assert data_files
    for path in data_files:
        assert unmeant(shellcheck(path), MEANT_FINDINGS + MEANT_IN_DATA_FILE_ONLY) == [], path.name


def test_rendered_bash_script_passes_shellcheck(tmp_path: Path) -> None:
    script = tmp_path / "pinctl.bash"
    script.write_text(completion.render("bash", cli))
    findings = shellcheck(script)
    assert unmeant(findings, MEANT_FINDINGS) == []
    for code, pattern in MEANT_FINDINGS:  # one that no longer occurs must leave the list
        assert any(c == code and re.fullmatch(pattern, line) for c, line in findings), (code, pattern)


def test_shell_data_files_are_package_data() -> None:
    # The wheel ships what pyproject.toml's package-data names; render() reads these at run time.
    package_data = toml_reader().loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    package = ROOT / "src" / "pinctl"
    for path in SHELL_DATA.iterdir():
        rel = path.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(rel, glob) for glob in package_data["pinctl"]), rel


def test_unknown_shell() -> None:
    with pytest.raises(ValueError, match="tcsh"):
        completion.render("tcsh", cli)
    result = subprocess.run([sys.executable, "-m", "pinctl", "completion", "tcsh"], capture_output=True, text=True)
    assert result.returncode == 2 and not result.stdout


# -- the model -----------------------------------------------------------------------------


def awkward_tree() -> click.Group:
    """Help texts full of what each shell and roff must escape."""

    @click.group(help="A tool's group: [brackets], $HOME, `ticks`, back\\slash and 'quotes'.")
    @click.option("-x", "--ex-tra", metavar="PATH", type=click.Path(), help="It's a path: [x] \\ $y.")
    def root() -> None:
        pass

    @root.command("pin", help="Pin. Second sentence.")
    @click.argument("refs", nargs=-1, metavar="REF...")
    @click.option("--mode", type=click.Choice(["a-b", "c.d"]), help='Say "which": one.')
    @click.option("-n", "--namespace", multiple=True, help=".dotted start")
    def pin(refs: tuple[str, ...], mode: str, namespace: tuple[str, ...]) -> None:
        pass

    return root


def test_model_kinds() -> None:
    node = completion.tree.tree(awkward_tree(), "tool")
    root_opts = {o.names: o for o in node.opts}
    value = root_opts[("-x", "--ex-tra")].value
    assert value is not None and value.kind == "files"
    assert root_opts[("--help",)].final and not root_opts[("-x", "--ex-tra")].final
    (pin,) = node.children
    assert pin.path == ("tool", "pin") and pin.help == "Pin"
    assert pin.args[0].value.kind == "refs" and pin.args[0].many
    kinds = {o.names[-1]: o.value.kind for o in pin.opts if o.value}
    assert kinds == {"--mode": "words", "--namespace": "namespaces"}


def test_summary_is_the_first_sentence() -> None:
    assert completion.tree.summary("Add patterns from PATH and PATH.d/. Default PATH: /x.") == \
        "Add patterns from PATH and PATH.d/"
    assert completion.tree.summary("  one line\n  two.  ") == "one line two"
    assert completion.tree.summary("word " * 40).endswith("...")


def test_unsafe_choice_is_refused() -> None:
    @click.command()
    @click.option("--bad", type=click.Choice(["$(reboot)"]))
    def root(bad: str) -> None:
        pass

    with pytest.raises(ValueError, match="reboot"):
        completion.render("bash", root)


@pytest.mark.parametrize("shell", completion.SHELLS)
def test_awkward_help_is_escaped(shell: str) -> None:
    script = completion.render(shell, awkward_tree())
    if shell == "bash":
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    if shell == "zsh":
        assert "'(-x --ex-tra)'{-x+,--ex-tra=}" in script
        assert r"[It'\''s a path: \[x\] \\ $y]" in script
    if shell == "fish":
        assert r"-d 'It\'s a path: [x] \\ $y'" in script


# -- man pages -----------------------------------------------------------------------------


def test_roff_escaping() -> None:
    assert manpages.escape("a-b \\ c") == "a\\-b \\e c"
    assert manpages.escape("caf\u00e9") == "caf\\[u00E9]"
    assert manpages.text_line(".hidden") == "\\&.hidden"
    assert manpages.text_line("'quoted") == "\\&'quoted"
    filled = manpages.fill(" ".join(["word"] * 30) + " .dot")
    assert all(len(line) <= 80 and not line.startswith(".") for line in filled.splitlines())


def test_every_command_has_a_page_with_every_section() -> None:
    pages = manpages.render_pages(cli)
    expected = {"-".join(path) + ".8" for path in command_paths(cli)} | {"pinctl.conf.5"}
    assert set(pages) == expected
    assert {"pinctl.8", "pinctl-ls.8", "pinctl-pin.8", "pinctl-config-show.8"} <= set(pages)
    for name, text in pages.items():
        if name.endswith(".8"):
            sections = re.findall(r"^\.SH (.*)$", text, re.MULTILINE)
            assert [s.replace("\\-", "-") for s in sections if s in REQUIRED_SECTIONS] == list(REQUIRED_SECTIONS), name


def test_th_line_is_fixed() -> None:
    for name, text in manpages.render_pages(cli).items():
        th = next(line for line in text.splitlines() if line.startswith(".TH "))
        assert f" {manpages.DATE} " in th and f'"pinctl {__version__}"' in th, name


def test_page_lists_every_option_of_its_command() -> None:
    pages = manpages.render_pages(cli)
    for ctx in completion.tree.contexts(cli):
        text = pages["-".join(completion.tree.command_path(ctx)) + ".8"]
        for param in ctx.command.get_params(ctx):
            if isinstance(param, click.Option):
                for name in param.opts:
                    assert f"\\fB{manpages.escape(name)}\\fR" in text, (ctx.command_path, name)


def test_exit_status_comes_from_the_epilog() -> None:
    text = manpages.render_pages(cli)["pinctl-pin.8"]
    status = text.split(".SH EXIT STATUS", 1)[1].split(".SH", 1)[0]
    assert re.findall(r"\\fB(\d)\\fR", status) == ["0", "1", "2", "3"]


def test_config_page_covers_every_key() -> None:
    text = manpages.render_config(cli)
    plain = text.replace("\\-", "-").replace("\\fB", "").replace("\\fR", "")
    for spec in KEYS.values():
        assert f"\n{spec.name}\n" in plain, spec.name
        assert spec.type_label in plain
        if spec.env:
            assert spec.env in plain
        if spec.flag:
            assert spec.flag in plain
        assert f"{spec.name} = " in plain  # its example
    for needle in ("PRECEDENCE", "config.d", "lexical order", "accumulates", "root", "crio dialect", "pinctl dialect"):
        assert needle in plain, needle


def test_man_pages_render_without_warnings_in_groff() -> None:
    groff = shutil.which("groff")
    if groff is None:
        pytest.skip("groff is not installed (tests/integration/test_shells.py insists on it)")
    for name, text in manpages.render_pages(cli).items():
        result = subprocess.run([groff, "-ww", "-man", "-Tutf8", "-z"], input=text, capture_output=True, text=True)
        assert result.returncode == 0 and not result.stderr, (name, result.stderr)


# -- the generator and docs/cli.md ------------------------------------------------------------


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pinctl_generate", ROOT / "tools" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generator_writes_completions_pages_and_cli_doc(tmp_path: Path) -> None:
    generate = load_generator()
    written = {str(p) for name in ("completions", "manpages", "cli-doc") for p in generate.GENERATORS[name](tmp_path)}
    assert set(COMMITTED.values()) <= written
    assert {"man/pinctl.8", "man/pinctl-config-show.8", "man/pinctl.conf.5", "docs/cli.md"} <= written
    for rel in written:
        assert (tmp_path / rel).read_bytes() == (ROOT / rel).read_bytes(), rel


def test_generator_reports_orphans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    generate = load_generator()
    (tmp_path / "man").mkdir()
    (tmp_path / "man" / "pinctl.8").write_text("x")
    (tmp_path / "man" / "pinctl-gone.8").write_text("x")
    monkeypatch.setattr(generate, "REPO", tmp_path)
    assert generate.orphan_files([Path("man/pinctl.8")]) == [Path("man/pinctl-gone.8")]


def test_cli_doc_is_each_help_at_a_fixed_width() -> None:
    doc = (ROOT / "docs" / "cli.md").read_text()
    from pinctl.examples import examples_text

    for ctx in completion.tree.contexts(cli, terminal_width=100, max_content_width=100):
        examples = examples_text(" ".join(ctx.command_path.split()[1:])).rstrip()
        shown = ctx.command.get_help(ctx).rstrip() + (f"\n\n{examples}" if examples else "")
        assert f"## {ctx.command_path}\n\n```text\n{shown}\n```" in doc
    assert max(len(line) for line in doc.splitlines() if not line.startswith(("#", "-", "<!--"))) <= 100

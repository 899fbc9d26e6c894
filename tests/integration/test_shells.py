"""pinctl's completions in real bash, zsh and fish; its man pages in groff, mandoc and man-db.

Each shell completes through its own machinery: bash through the function `complete -p pinctl`
names (loaded by hand and by bash-completion's loader) and through readline in a terminal; zsh
through compsys in a terminal; fish through `complete -C`. The scripts are the ones
`make install` puts where each shell looks. A stand-in pinctl first in PATH records every run
and hands on to the real one: commands and options must complete without it, image references
and namespaces must ask it. With CI=true a missing shell or tool fails instead of skipping; the
Debian packages are listed in scripts/test-packages.txt.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from pinctl import completion
from pinctl.cli import cli
from tests.harness import images
from tests.harness.containerd import ContainerdDaemon

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
PACKAGES = ROOT / "scripts" / "test-packages.txt"
APP = ("example.test/shells/app:1.0", "example.test/shells/app:latest")
TOOL = "registry.example/shells/tool:2"  # pinned: the only image of the two that unpin offers
PIN_LABEL = {"io.cri-containerd.pinned": "pinned"}
BASH_COMPLETION = Path("/usr/share/bash-completion/bash_completion")
LoadImages = Callable[..., list[images.ImageInfo]]


def missing(reason: str) -> NoReturn:
    """Skip locally, fail in CI: a skipped shell there would hide a broken set-up."""
    message = f"{reason} (install the packages in {PACKAGES.relative_to(ROOT)})"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def need(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        missing(f"{tool} is not installed")
    return found


# -- the sandbox: installed scripts, a recording pinctl, private homes -------------------------


@dataclass
class Sandbox:
    """Where the shells run: env for them, and the file the stand-in pinctl records runs in."""

    env: dict[str, str]
    prefix: Path
    calls_file: Path
    tmp: Path

    def calls(self) -> list[str]:
        """The argument lists pinctl was run with since the last reset, one string each."""
        return self.calls_file.read_text().splitlines() if self.calls_file.exists() else []

    def reset_calls(self) -> None:
        self.calls_file.unlink(missing_ok=True)

    def point_at(self, daemon: ContainerdDaemon) -> None:
        self.env["CONTAINERD_ADDRESS"] = daemon.address
        self.env["PINCTL_CONTAINERD_CONFIG"] = str(daemon.config_path)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make install` into a private prefix: the files each shell and man(1) will find."""
    prefix = tmp_path_factory.mktemp("prefix")
    subprocess.run([need("make"), "-C", str(ROOT), "install", f"PREFIX={prefix}"], check=True, capture_output=True)
    return prefix


@pytest.fixture
def sandbox(tmp_path: Path, installed: Path) -> Sandbox:
    real = VENV_BIN / "pinctl"
    assert real.exists(), f"{real} is missing: run scripts/bootstrap"
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    calls = tmp_path / "pinctl-calls"
    stand_in = fake_bin / "pinctl"
    stand_in.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{calls}"\nexec "{real}" "$@"\n')
    stand_in.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    # An empty config of our own, so that no file of the machine's decides what completes.
    empty_config = tmp_path / "etc" / "config.toml"
    empty_config.parent.mkdir()
    empty_config.write_text("")
    env = {
        "PATH": f"{fake_bin}:{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_DIRS": f"{installed}/share:/usr/share",
        "LANG": "C.UTF-8",
        "TERM": "xterm",
        # Nothing answers here: the tests that need images point it at a daemon.
        "CONTAINERD_ADDRESS": str(tmp_path / "no-containerd.sock"),
        "PINCTL_CONFIG": str(empty_config),
    }
    return Sandbox(env, installed, calls, tmp_path)


@pytest.fixture
def engine(
    sandbox: Sandbox,
    containerd17: ContainerdDaemon,
    clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
    load_images: LoadImages,
) -> ContainerdDaemon:
    """containerd 1.7 with an unpinned APP and a pinned TOOL in k8s.io, and the sandbox pointed at it."""
    daemon = clean_k8s_io(containerd17)
    load_images(daemon, [images.recipe(*APP, seed="shells-app"), images.recipe(TOOL, seed="shells-tool")])
    daemon.label_image(TOOL, PIN_LABEL)
    sandbox.point_at(daemon)
    return daemon


# -- bash through its completion function ------------------------------------------------------

BASH_DRIVER = r"""
{load}
spec=$(complete -p pinctl) || exit 3
fn=${{spec#*-F }}
fn=${{fn%% *}}
COMP_LINE=$1
COMP_POINT=${{#COMP_LINE}}
read -r -a COMP_WORDS <<<"$COMP_LINE"
[[ $COMP_LINE == *' ' ]] && COMP_WORDS+=('')
COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))
COMP_TYPE=9
COMP_KEY=9
COMPREPLY=()
"$fn" pinctl "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD - 1]}}"
printf '%s\n' "${{COMPREPLY[@]}}"
"""
BASH_LOADS = {
    # The script alone, as `source <(pinctl completion bash)` gives it.
    "plain": "source {script}",
    # bash-completion finds it on its own, in $XDG_DATA_DIRS/bash-completion/completions.
    "bash-completion": f"source {BASH_COMPLETION}\n__load_completion pinctl || exit 4",
}


def bash_complete(sandbox: Sandbox, line: str, load: str = "plain", tracer: list[str] | None = None) -> list[str]:
    bash = need("bash")
    if load == "bash-completion" and not BASH_COMPLETION.exists():
        missing("bash-completion is not installed")
    script = sandbox.prefix / "share/bash-completion/completions/pinctl"
    driver = BASH_DRIVER.format(load=BASH_LOADS[load].format(script=script))
    argv = [*(tracer or []), bash, "--norc", "--noprofile", "-c", driver, "bash", line]
    result = subprocess.run(argv, env=sandbox.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stderr, (line, result.returncode, result.stderr)
    return [word for word in result.stdout.splitlines() if word]


@pytest.mark.parametrize("load", list(BASH_LOADS))
def test_bash_completes_commands_options_and_choices_without_pinctl(sandbox: Sandbox, load: str) -> None:
    expected = {
        "pinctl pi": ["pin"],
        "pinctl ": [p[1] for p in (completion.tree.command_path(c) for c in completion.tree.contexts(cli)) if len(p) == 2],
        "pinctl config s": ["show"],
        "pinctl ls --dr": ["--drift"],
        "pinctl ls -o ": ["table", "wide", "json"],
        "pinctl config show -o ": ["table", "json"],
        "pinctl config export --for cri": ["crio", "cri-dockerd"],
        "pinctl --pattern-dialect c": ["crio"],
        "pinctl -n k8s.io --address /run/x.sock --timeout 3 l": ["ls"],  # options before the command
        "pinctl ls --output=j": ["json"],  # readline replaces only the text after '='
        "pinctl completion ": ["bash", "zsh", "fish"],
        "pinctl pin --dry-run --": None,  # pin's long options, checked below
    }
    for line, want in expected.items():
        got = bash_complete(sandbox, line, load)
        if want is None:
            assert "--dry-run" in got and "--namespace" in got and all(w.startswith("--") for w in got), got
        else:
            assert got == want, line
    assert sandbox.calls() == []


def test_bash_starts_no_program_for_a_command_name(sandbox: Sandbox) -> None:
    strace = need("strace")
    trace = sandbox.tmp / "execve.trace"
    got = bash_complete(sandbox, "pinctl pi", tracer=[strace, "-f", "-qq", "-e", "trace=execve", "-o", str(trace)])
    assert got == ["pin"]
    execs = [line for line in trace.read_text().splitlines() if "execve(" in line]
    assert len(execs) == 1 and '"--norc"' in execs[0], execs  # bash itself, and nothing else


@pytest.mark.parametrize("load", list(BASH_LOADS))
def test_bash_completes_refs_and_namespaces_from_pinctl(sandbox: Sandbox, engine: ContainerdDaemon, load: str) -> None:
    assert bash_complete(sandbox, "pinctl pin example.test/shells/", load) == list(APP)
    assert sandbox.calls() == ["ls -q"]
    sandbox.reset_calls()
    # Typed options reach pinctl; readline replaces only the text after ':', so only that is offered.
    assert bash_complete(sandbox, f"pinctl -n k8s.io pin --address {engine.address} example.test/shells/app:", load) \
        == ["1.0", "latest"]
    assert sandbox.calls() == [f"ls -q --namespace=k8s.io --address={engine.address}"]
    sandbox.reset_calls()
    assert "k8s.io" in bash_complete(sandbox, "pinctl ls -n ", load)
    assert sandbox.calls() == ["namespaces -q"]


@pytest.mark.parametrize("load", list(BASH_LOADS))
def test_bash_offers_only_pinned_refs_to_unpin(sandbox: Sandbox, engine: ContainerdDaemon, load: str) -> None:
    offered = bash_complete(sandbox, f"pinctl -n k8s.io unpin -a {engine.address} ", load)
    assert TOOL in offered and not set(APP) & set(offered), offered
    assert sandbox.calls() == [f"ls -q --pinned --namespace=k8s.io --address={engine.address}"]
    assert bash_complete(sandbox, "pinctl unpin example.test/shells/", load) == []
    assert bash_complete(sandbox, f"pinctl unpin -a{engine.address} registry.example/", load) == [TOOL]
    # What is offered follows the labels, not the script.
    engine.label_image(APP[0], PIN_LABEL)
    assert bash_complete(sandbox, "pinctl unpin example.test/shells/app:", load) == ["1.0", "latest"]
    engine.label_image(TOOL, {"io.cri-containerd.pinned": ""})
    assert bash_complete(sandbox, "pinctl unpin registry.example/", load) == []


def test_bash_and_fish_complete_history_from_the_journal(sandbox: Sandbox) -> None:
    """history's REF is mostly an image that is gone: the names come from the deletion journal
    (history -q --all), and a --history-dir typed on the line is passed on."""
    from pinctl.journal import Deletion
    from pinctl.journal.store import Journal

    journal = sandbox.tmp / "history"
    gone = "example.test/shells/gone:1"
    Journal(str(journal)).append(Deletion(time.time(), "containerd", "k8s.io", (gone,), "sha256:" + "ab" * 32))
    assert bash_complete(sandbox, f"pinctl history --history-dir {journal} example.test/sh") == [gone]
    assert sandbox.calls() == [f"history -q --all --history-dir={journal}"]
    sandbox.reset_calls()
    sandbox.env["PINCTL_HISTORY_DIR"] = str(journal)
    assert fish_complete(sandbox, "pinctl history example.test/") == [gone]
    assert sandbox.calls() == ["history -q --all"]


def test_bash_is_silent_and_quick_without_a_daemon(sandbox: Sandbox) -> None:
    """Quick: with pinctl's timeout an hour, a completion that waited for the daemon would outlast
    bash_complete's deadline; one that sees no socket and gives up returns at once."""
    Path(sandbox.env["PINCTL_CONFIG"]).write_text("timeout = 3600\n")
    assert bash_complete(sandbox, "pinctl pin ex") == []  # bash_complete asserts an empty stderr
    assert bash_complete(sandbox, "pinctl -n ") == []
    assert sandbox.calls() == ["ls -q", "namespaces -q"]


# -- terminals: readline and zle, driven by keys -----------------------------------------------


class Terminal:
    """A shell in a private tmux server: keys in, screen out."""

    def __init__(self, sandbox: Sandbox, argv: list[str]) -> None:
        self.tmux = need("tmux")
        self.socket = sandbox.tmp / "tmux.sock"
        self.env = sandbox.env
        self.run("new-session", "-d", "-x", "200", "-y", "50", *argv)

    def run(self, *args: str) -> str:
        argv = [self.tmux, "-S", str(self.socket), "-f", "/dev/null", *args]
        return subprocess.run(argv, env=self.env, check=True, capture_output=True, text=True, timeout=60).stdout

    def type(self, text: str, *keys: str) -> None:
        self.run("send-keys", "-l", text)
        if keys:
            self.run("send-keys", *keys)

    def screen(self) -> str:
        return self.run("capture-pane", "-p")

    def wait_for(self, pattern: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if re.search(pattern, screen, re.MULTILINE):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} on the screen:\n{screen}")
            time.sleep(0.05)

    def command(self, text: str) -> None:
        """Run text as a command line and wait until it has finished."""
        self.type(f"{text}; echo DO''NE", "Enter")
        self.wait_for(r"^DONE$")
        self.type("clear", "Enter")
        self.wait_for(r"\A\S+ *\n\s*\Z")

    def fresh_line(self) -> None:
        """Drop the typed line and clear the screen, so old listings cannot match."""
        self.run("send-keys", "C-u", "C-l")
        self.wait_for(r"\A\S+ *\n\s*\Z")

    def close(self) -> None:
        subprocess.run([self.tmux, "-S", str(self.socket), "kill-server"], env=self.env, capture_output=True)


@pytest.fixture
def terminal(sandbox: Sandbox) -> Iterator[Callable[[list[str]], Terminal]]:
    opened: list[Terminal] = []

    def open_terminal(argv: list[str]) -> Terminal:
        opened.append(Terminal(sandbox, argv))
        return opened[-1]

    yield open_terminal
    for term in opened:
        term.close()


def test_bash_readline_completes_in_a_terminal(sandbox: Sandbox, engine: ContainerdDaemon, terminal: Callable[[list[str]], Terminal]) -> None:
    term = terminal([need("bash"), "--norc", "--noprofile", "-i"])
    term.command(f"PS1='$ '; source {BASH_COMPLETION}")
    sandbox.reset_calls()
    term.type("pinctl pi", "Tab")
    term.wait_for(r"^\$ pinctl pin$")  # tmux drops the trailing blank; the next word shows it is there
    assert sandbox.calls() == []
    term.type("example.test/shells/app:l", "Tab")
    term.wait_for(r"^\$ pinctl pin example\.test/shells/app:latest$")
    assert sandbox.calls() == ["ls -q"]


def zsh_terminal(sandbox: Sandbox, terminal: Callable[[list[str]], Terminal], setup: str) -> Terminal:
    term = terminal([need("zsh"), "-f", "-i"])
    term.command(f"PROMPT='%% '; {setup}autoload -Uz compinit; compinit -u -d {sandbox.tmp}/zcompdump")
    return term


ZSH_SETUPS = {
    "fpath": "fpath=({prefix}/share/zsh/site-functions $fpath); ",
    "source": "",  # sourced after compinit, below
}


def test_zsh_completes_history_from_the_journal(sandbox: Sandbox, terminal: Callable[[list[str]], Terminal]) -> None:
    from pinctl.journal import Deletion
    from pinctl.journal.store import Journal

    journal = sandbox.tmp / "history"
    Journal(str(journal)).append(Deletion(time.time(), "containerd", "k8s.io", ("example.test/shells/gone:1",)))
    sandbox.env["PINCTL_HISTORY_DIR"] = str(journal)
    term = zsh_terminal(sandbox, terminal, ZSH_SETUPS["fpath"].format(prefix=sandbox.prefix))
    sandbox.reset_calls()
    term.type("pinctl history example.test/shells/g", "Tab")
    term.wait_for(r"^% pinctl history example\.test/shells/gone:1$")
    assert sandbox.calls() == ["history -q --all"]


@pytest.mark.parametrize("setup", list(ZSH_SETUPS))
def test_zsh_completes_with_descriptions(sandbox: Sandbox, engine: ContainerdDaemon, terminal: Callable[[list[str]], Terminal], setup: str) -> None:
    term = zsh_terminal(sandbox, terminal, ZSH_SETUPS[setup].format(prefix=sandbox.prefix))
    if setup == "source":
        term.command("source <(pinctl completion zsh)")
    sandbox.reset_calls()
    term.type("pinctl pi", "Tab")
    term.wait_for(r"^% pinctl pin$")
    term.fresh_line()
    term.type("pinctl ls --", "Tab")
    term.wait_for(r"^--drift +-- Only where labels and policy disagree")
    term.wait_for(r"^--namespace +-- containerd namespace, repeatable")
    term.fresh_line()
    term.type("pinctl config ", "Tab")
    term.wait_for(r"^show +-- Show the effective configuration and where each value came from")
    assert sandbox.calls() == [], "commands and options must complete without starting pinctl"
    term.fresh_line()
    term.type("pinctl -n k8s.io pin example.test/shells/app:l", "Tab")
    term.wait_for(r"^% pinctl -n k8s\.io pin example\.test/shells/app:latest$")
    assert sandbox.calls() == ["ls -q --namespace=k8s.io"]
    term.fresh_line()
    term.type("pinctl ls -n k8s", "Tab")
    term.wait_for(r"^% pinctl ls -n k8s\.io$")
    term.fresh_line()
    sandbox.reset_calls()
    term.type(f"pinctl unpin -a {engine.address} ", "Tab")
    screen = term.wait_for(re.escape(TOOL))
    assert "example.test/shells/app" not in screen, screen
    assert sandbox.calls() == [f"ls -q --pinned --address={engine.address}"]


# -- fish through complete -C --------------------------------------------------------------------


def fish_complete(sandbox: Sandbox, line: str, tracer: list[str] | None = None) -> list[str]:
    # The script is autoloaded from $XDG_DATA_DIRS/fish/vendor_completions.d, as installed.
    argv = [*(tracer or []), need("fish"), "-c", f"complete -C{line!r}"]
    result = subprocess.run(argv, env=sandbox.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stderr, (line, result.stderr)
    return result.stdout.splitlines()


def test_fish_completes_with_descriptions_without_pinctl(sandbox: Sandbox) -> None:
    assert fish_complete(sandbox, "pinctl pi") == ["pin\tPin images: add io.cri-containerd.pinned=pinned"]
    drift = fish_complete(sandbox, "pinctl ls --dr")
    assert drift == ["--drift\tOnly where labels and policy disagree: covered by a pattern but not labelled, or..."]
    assert [c.split("\t")[0] for c in fish_complete(sandbox, "pinctl config show -o ")] == ["json", "table"]
    shows = fish_complete(sandbox, "pinctl config s")
    assert shows == ["show\tShow the effective configuration and where each value came from"]
    assert "ls\tList image references, whether each is pinned and why" in fish_complete(sandbox, "pinctl -n x ")
    assert sandbox.calls() == []


def test_fish_starts_no_program_for_a_command_name(sandbox: Sandbox) -> None:
    trace = sandbox.tmp / "execve.trace"
    tracer = [need("strace"), "-f", "-qq", "-e", "trace=execve", "-o", str(trace)]
    assert fish_complete(sandbox, "pinctl pi", tracer)[0].startswith("pin\t")
    execs = [line for line in trace.read_text().splitlines() if "execve(" in line]
    assert len(execs) == 1 and "fish" in execs[0], execs  # fish itself, and nothing else


def test_fish_completes_refs_and_namespaces_from_pinctl(sandbox: Sandbox, engine: ContainerdDaemon) -> None:
    assert fish_complete(sandbox, "pinctl pin example.test/shells/app:") == list(APP)
    assert sandbox.calls() == ["ls -q"]
    sandbox.reset_calls()
    assert fish_complete(sandbox, "pinctl unpin --namespace k8s.io registry.example/sh") == [TOOL]
    assert sandbox.calls() == ["ls -q --pinned --namespace=k8s.io"]
    sandbox.reset_calls()
    assert fish_complete(sandbox, f"pinctl unpin -a{engine.address} example.test/shells/") == []  # not pinned
    assert sandbox.calls() == [f"ls -q --pinned --address={engine.address}"]
    sandbox.reset_calls()
    assert "k8s.io" in [c.split("\t")[0] for c in fish_complete(sandbox, "pinctl ls -n ")]
    assert sandbox.calls() == ["namespaces -q"]


def test_fish_is_silent_without_a_daemon(sandbox: Sandbox) -> None:
    assert fish_complete(sandbox, "pinctl pin ex") == []  # fish_complete asserts an empty stderr


# -- the scripts parse, awkward help included ----------------------------------------------------


@pytest.mark.parametrize("shell", completion.SHELLS)
def test_scripts_parse(shell: str, tmp_path: Path) -> None:
    from tests.unit.test_completion import awkward_tree

    binary = need(shell)
    for name, root in (("pinctl", cli), ("awkward", awkward_tree())):
        path = tmp_path / f"{name}.{shell}"
        path.write_text(completion.render(shell, root))
        result = subprocess.run([binary, "-n", str(path)], capture_output=True, text=True)
        assert result.returncode == 0 and not result.stderr, (name, result.stderr)


# -- man pages ---------------------------------------------------------------------------------


def man_pages() -> list[Path]:
    return sorted((ROOT / "man").glob("*.[58]"))


def test_man_pages_have_no_warnings() -> None:
    groff, mandoc, lexgrog = need("groff"), need("mandoc"), need("lexgrog")
    assert len(man_pages()) >= 3
    for page in man_pages():
        result = subprocess.run([groff, "-ww", "-man", "-Tutf8", "-z", str(page)], capture_output=True, text=True)
        assert result.returncode == 0 and not result.stderr, (page.name, result.stderr)
        result = subprocess.run([mandoc, "-T", "lint", str(page)], capture_output=True, text=True)
        assert result.returncode == 0 and not (result.stdout + result.stderr), (page.name, result.stdout)
        result = subprocess.run([lexgrog, str(page)], capture_output=True, text=True)
        name = page.name.rsplit(".", 1)[0]
        assert result.returncode == 0 and f'"{name} - ' in result.stdout, (page.name, result.stdout)


def test_man_finds_the_installed_pages(sandbox: Sandbox) -> None:
    man = need("man")
    env = {**sandbox.env, "MANPATH": f"{sandbox.prefix}/share/man", "MANWIDTH": "100", "MAN_DISABLE_SECCOMP": "1"}
    for args, needle in ((["8", "pinctl"], "pinctl-ls(8)"), (["pinctl-config-show"], "pinctl config show"),
                         (["5", "pinctl.conf"], "pinned_images")):
        result = subprocess.run([man, "-P", "cat", *args], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, (args, result.stderr)
        assert needle in result.stdout and "NAME" in result.stdout, args


def test_man_finds_the_pages_after_the_readmes_set_up() -> None:
    """Issue 30: after scripts/sandbox (an editable install, which installs no data files) and its
    `export PATH=.venv/bin:$PATH`, `man pinctl` found nothing. scripts/bootstrap links the pages
    below .venv/share/man, where man-db looks for a bin/ on PATH; no MANPATH is needed."""
    man = need("man")
    env = {"PATH": f"{ROOT / '.venv' / 'bin'}:/usr/bin:/bin", "HOME": "/nonexistent", "MAN_DISABLE_SECCOMP": "1"}
    for args, page in ((["pinctl"], "pinctl.8"), (["pinctl-import"], "pinctl-import.8"), (["5", "pinctl.conf"],
                                                                                          "pinctl.conf.5")):
        found = subprocess.run([man, "-w", *args], env=env, capture_output=True, text=True, timeout=60)
        assert found.returncode == 0, (args, found.stderr)
        assert Path(found.stdout.strip()).resolve() == (ROOT / "man" / page).resolve(), found.stdout


def test_make_install_honours_destdir_and_prefix(tmp_path: Path) -> None:
    make = need("make")
    subprocess.run([make, "-C", str(ROOT), "install", f"DESTDIR={tmp_path}", "PREFIX=/usr"], check=True,
                   capture_output=True)
    share = tmp_path / "usr/share"
    for rel in ("bash-completion/completions/pinctl", "zsh/site-functions/_pinctl",
                "fish/vendor_completions.d/pinctl.fish", "man/man8/pinctl.8", "man/man8/pinctl-config-show.8",
                "man/man5/pinctl.conf.5"):
        assert (share / rel).is_file(), rel
    assert (share / "bash-completion/completions/pinctl").read_bytes() == (ROOT / "completions/bash/pinctl").read_bytes()

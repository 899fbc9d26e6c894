"""Every command as an operator sees it in a real terminal, 60, 80 and 120 columns wide:
tmux runs it and capture-pane -J reads back each line whole (a line the terminal had to wrap
comes back as one), so a line wider than the window is seen as such. Against a real containerd
1.7 and its CRI, with a long reference, a 40-character one a pattern covers but nothing pins yet,
a policy from a file with a long path and an ineffective label, so that every table has
something that does not fit."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rich.cells import cell_len

from tests.harness import archives, images
from tests.harness.containerd import ContainerdDaemon
from tests.integration.test_terminal import VENV_BIN, LoadImages, Tmux, pinctl_env

LONG_REF = "registry.example.test/team-platform/very-long-component-name/ingress-controller:v1.2.3-rc.1"
INEFFECTIVE = "example.test/fit/labelled:1"
READ_REF = "registry.example.test/read/tools/alpha:1"  # 40 characters, as the issue's
READ_PATTERN = "registry.example.test/read/*"
# Each command and switch with a table, and what must be on its screen.
COMMANDS: list[tuple[str, str]] = [
    ("ls", "NAMESPACE"),
    ("ls --drift", "DRIFT"),
    ("ls --cri", "CRI PINNED"),
    ("ls --unpinned", "WHY"),
    ("ls --cri --drift", "CRI PINNED"),
    ("ls -n all", "WHY"),
    ("check", "CRI PINNED"),
    ("gc plan", "Verdict:"),
    ("gc plan --usage 99 --min-age 0", "DELETION ORDER"),
    ("prune --dry-run --until-usage 100", "nothing would go"),
    ("prune --dry-run --all-unused --min-age 0", "would remove"),
    (f"pull {LONG_REF}", "present"),
    ("config show", "SOURCE"),
    ("config lint", "config lint:"),
    ("namespaces", "k8s.io"),
    ("pin --dry-run 'registry.example.test/*'", "would be pinned"),
    ("unpin --dry-run example.test/fit/app:1", "pins it again at the next sync"),
    ("--help", "Commands:"),
    ("options", "--namespace"),
    ("ls --help", "pinctl options"),
]


@pytest.fixture
def fit_node(containerd17: ContainerdDaemon, clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
             load_images: LoadImages, tmp_path: Path) -> Iterator[tuple[ContainerdDaemon, Path]]:
    daemon = clean_k8s_io(containerd17)
    load_images(daemon, [images.recipe("example.test/fit/app:1", "example.test/fit/app:latest", seed="fit-app"),
                         images.recipe(LONG_REF, seed="fit-long"), images.recipe(INEFFECTIVE, seed="fit-label"),
                         images.recipe(READ_REF, seed="fit-read"),
                         images.recipe("example.test/loose:1", seed="fit-loose")])  # what a prune may take
    daemon.label_image(INEFFECTIVE, {"io.cri-containerd.pinned": "true"})  # not 'pinned': a long WHY
    # A policy in a file whose path alone is long, as a drop-in of one team would be.
    policy = tmp_path / "etc" / "pinctl-config-of-the-platform-team" / "config.toml"
    policy.parent.mkdir(parents=True)
    policy.write_text(f'pinned_images = ["example.test/fit/*", "*ingress*", "*nothing-matches-this*", "{READ_PATTERN}"]\n')
    yield daemon, policy
    clean_k8s_io(daemon)


def terminal_at(daemon: ContainerdDaemon, policy: Path, tmp_path: Path, width: int) -> Tmux:
    env = pinctl_env(daemon, {
        "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin", "TERM": "xterm-256color", "LANG": "C.UTF-8",
        "CONTAINER_RUNTIME_ENDPOINT": f"unix://{daemon.address}", "HOME": str(tmp_path),
        "PINCTL_CONFIG": str(policy),
    })
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    # Tall enough that no command's output scrolls off the screen capture-pane reads.
    return Tmux(tmp_path, env, width=width, height=400)


def assert_lines_fit(command: str, lines: list[str], width: int) -> None:
    shown = "\n".join(lines)
    too_wide = [line for line in lines if cell_len(line) > width]
    assert not too_wide, f"pinctl {command} at {width} columns:\n{shown}"
    assert all(line == line.rstrip() for line in lines), f"padded lines in pinctl {command}:\n{shown}"
    assert "internal error" not in shown and "Traceback" not in shown, shown


@pytest.mark.parametrize("width", [60, 80, 120])
def test_every_command_fits_the_terminal(fit_node: tuple[ContainerdDaemon, Path], tmp_path: Path,
                                         width: int) -> None:
    daemon, policy = fit_node
    terminal = terminal_at(daemon, policy, tmp_path, width)
    try:
        screens = {}
        for command, needle in COMMANDS:
            lines = terminal.output_of(f"pinctl {command}")
            assert re.fullmatch(r"EXIT=[0-3]", lines.pop()), (command, lines)
            assert_lines_fit(command, lines, width)
            assert needle in " ".join(" ".join(lines).split()), (command, "\n".join(lines))
            screens[command] = lines
    finally:
        terminal.close()
    ls = screens["ls"]
    # One namespace folds into a heading; the long reference is whole where the window holds it.
    assert ls[0] == "NAMESPACE: k8s.io", ls
    assert any(line.split()[0] == LONG_REF for line in ls if line.strip()) is (width > len(LONG_REF)), ls
    # WHY is never a stub: the ineffective label's explanation is there in full, on its lines.
    words = " ".join(" ".join(ls).split())
    assert "ineffective label io.cri-containerd.pinned=true: the value must be 'pinned'" in words
    # The short thing: a pattern without its file; -o wide and JSON give the whole path.
    assert f"pattern {READ_PATTERN} not applied: pinctl sync" in words and "config.toml" not in words
    help_lines = screens["--help"]
    assert help_lines.index("Commands:") < 24 - 13, help_lines  # the commands in the first 24 lines


def test_a_pipe_still_gets_whole_values(fit_node: tuple[ContainerdDaemon, Path], tmp_path: Path) -> None:
    """Into a pipe nothing is cut or wrapped, and the 40-character name's row, whose pattern is not
    applied, stays under 120 columns; -o wide says the whole WHY, with the pattern's file."""
    daemon, policy = fit_node
    terminal = terminal_at(daemon, policy, tmp_path, 80)
    try:
        # stderr aside: it reaches the terminal directly, racing cat's copy of stdout.
        lines = terminal.output_of("pinctl ls 2>/dev/null | cat")
        wide = terminal.output_of("pinctl ls -o wide 2>/dev/null | cat")
        # Beside the 92-character name every row is wider (columns line up): this one alone.
        alone = terminal.output_of(f"pinctl ls '{READ_PATTERN}' 2>/dev/null | cat")
    finally:
        terminal.close()
    assert lines.pop() == "EXIT=0" and wide.pop() == "EXIT=0" and alone.pop() == "EXIT=0"
    assert lines[0].split()[:2] == ["NAMESPACE", "REF"] and any(LONG_REF in line.split() for line in lines)
    assert any(len(line) > 80 for line in lines)  # the terminal wraps them; capture-pane -J joins them again
    assert "…" not in "\n".join(lines)
    read = next(line for line in alone if READ_REF in line.split())
    assert len(read) < 120 and "not applied: pinctl sync" in read, alone
    whole = next(line for line in wide if READ_REF in line.split())
    assert f"pattern {READ_PATTERN} ({policy}:1), not applied: pinctl sync" in whole


@pytest.mark.parametrize("width", [60, 80])
def test_ls_never_cuts_a_name_that_fits_the_window(fit_node: tuple[ContainerdDaemon, Path], tmp_path: Path,
                                                   width: int) -> None:
    """The issue's report: at 80 and 60 columns ls cut a 40-character name to 'registry…/…/alpha'
    while WHY took 30 columns. Now WHY gives way and the name stays whole; the 92-character one,
    wider than the window, is cut into a pattern that, pasted back, lists that image alone."""
    daemon, policy = fit_node
    terminal = terminal_at(daemon, policy, tmp_path, width)
    try:
        lines = terminal.output_of("pinctl ls")
        assert lines.pop() == "EXIT=0", lines
        assert_lines_fit("ls", lines, width)
        assert any(line == READ_REF or line.startswith(READ_REF + "  ") for line in lines), "\n".join(lines)
        assert "…" not in "\n".join(lines)
        [cut] = [line for line in lines if line.startswith("*") and line.endswith("*")]
        assert cut[1:-1] in LONG_REF and cell_len(cut) <= width
        pasted = terminal.output_of(f"pinctl ls -q '{cut}'")
    finally:
        terminal.close()
    assert pasted.pop() == "EXIT=0"
    assert [name for name in pasted if not name.startswith("sha256:")] == [LONG_REF], pasted
    words = " ".join(" ".join(lines).split())
    assert f"pattern {READ_PATTERN} not applied: pinctl sync" in words


# As the sandbox has them: references up to 29 cells, one of 51, and the CRI sandbox image.
FIRST_DAY_REFS = ["example.test/day/alpha:1.0", "localhost:5000/team/alpha:1.0", "localhost:5000/tools/zeta:0.9"]
LONG_ARCHIVED = "localhost:5000/platform/observability/agent-eta:0.9"


def test_an_operators_first_day_at_80_columns(containerd17: ContainerdDaemon,
                                              clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
                                              load_images: LoadImages, tmp_path: Path) -> None:
    """ls --cri, import and two failures as issue 30 saw them: a one-word WHY on its row, every
    reference at least 20 cells, each result on one line, an empty WHY left out, and a missing
    image or archive said in one message."""
    daemon = clean_k8s_io(containerd17)
    load_images(daemon, [images.recipe(*FIRST_DAY_REFS[:2], seed="day-alpha"),
                         images.recipe(FIRST_DAY_REFS[2], seed="day-zeta")])
    policy = tmp_path / "pinctl-sandbox" / "config.toml"
    policy.parent.mkdir()
    policy.write_text('pinned_images = ["*alpha*"]\n')
    archive = tmp_path / "images" / "node-images-2024-11-30-release.tar"
    archive.parent.mkdir()
    archives.oci_archive(archive, [images.recipe(FIRST_DAY_REFS[0], "localhost:5000/team/alpha:1.0", seed="day-alpha"),
                                   images.recipe(LONG_ARCHIVED, seed="day-eta")])
    terminal = terminal_at(daemon, policy, tmp_path, 80)
    try:
        assert terminal.output_of("cd") == ["EXIT=0"]  # to HOME, tmp_path: the archive by a short path
        ls = terminal.output_of("pinctl ls --cri")
        imported = terminal.output_of(f"pinctl import --pin {archive.relative_to(tmp_path)}")
        missing_archive = terminal.output_of("pinctl import nothere.tar")
        missing_image = terminal.output_of("pinctl pin epsilon:3.1")
    finally:
        terminal.close()
    sandbox = next(line for line in ls if line.startswith(containerd17.sandbox_image))
    assert sandbox.split()[-1] == "sandbox" or "    label; sandbox" in ls, "\n".join(ls)
    assert "    sandbox" not in ls, "\n".join(ls)
    for command, lines in (("ls --cri", ls), ("import", imported)):
        assert lines.pop() == "EXIT=0", (command, lines)
        assert_lines_fit(command, lines, 80)
    # import: the archive and its one platform fold into headings; no WHY column with nothing in it.
    assert imported[0] == f"ARCHIVE: {archive.relative_to(tmp_path)}" and imported[1].startswith("PLATFORMS: ")
    header = imported[2]
    assert header.split() == ["REF", "RESULT", "SIZE"], "\n".join(imported)
    end = next(n for n, line in enumerate(imported) if line.startswith("pinctl: import:"))
    rows, summary = imported[3:end], " ".join(line.strip() for line in imported[end:])
    refs = [row[:header.index("RESULT")].strip() for row in rows]
    assert len(refs) == 3 and all(cell_len(ref) >= 20 for ref in refs), "\n".join(imported)
    assert {row[header.index("RESULT"):header.index("SIZE")].strip() for row in rows} <= {
        "present, pinned", "present, already pinned", "imported, pinned"}
    assert summary.startswith("pinctl: import: 1 imported, 2 present"), summary
    assert missing_archive == ["pinctl: nothere.tar: cannot be opened: no such file or directory", "EXIT=1"]
    assert missing_image.pop() == "EXIT=1"
    assert missing_image[0].startswith("pinctl: pin epsilon:3.1: no image epsilon:3.1")
    assert all(line.startswith("    ") for line in missing_image[1:]), missing_image  # one message, folded

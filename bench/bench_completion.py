"""Completion latency: a command name (no Python started) and an image reference among 1,000 images.

Run from the repository root, as root:  .venv/bin/python -m bench.bench_completion [--images 1000]

Each shell completes through its own entry point, in a fresh process per run: bash calls the
function `complete -p pinctl` names, fish runs `complete -C`. zsh's compsys needs a terminal,
so it is left out. strace shows which programs each completion runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from bench.common import PINCTL, REPO, Row, containerd_with_images, median_time, overhead_row, report, run_once

BASH_SCRIPT = REPO / "completions" / "bash" / "pinctl"
FISH_SCRIPT = REPO / "completions" / "fish" / "pinctl.fish"
VENV_BIN = str(Path(PINCTL).parent)
COMMAND_LINE = "pinctl pi"
REF_LINE = "pinctl pin example.test/bench-99"  # bench-99 and bench-990 ... bench-999

BASH_COMPLETE = r"""
source "$1"
COMP_LINE=$2
COMP_POINT=${#COMP_LINE}
COMPREPLY=()
_pinctl
printf '%s\n' "${COMPREPLY[@]}"
"""
# The completion function alone, called `calls` times in one shell, beside a function that
# only sets COMPREPLY: what a TAB costs once the script is loaded.
BASH_LOOP = r"""
source "$1"
COMP_LINE=$2
COMP_POINT=${#COMP_LINE}
noop() { COMPREPLY=(pin); }
start=$EPOCHREALTIME
for ((i = 0; i < $3; i++)); do COMPREPLY=(); _pinctl; done
middle=$EPOCHREALTIME
for ((i = 0; i < $3; i++)); do COMPREPLY=(); noop; done
end=$EPOCHREALTIME
echo "$start $middle $end"
"""


def shell_env(address: Optional[str] = None) -> dict[str, str]:
    env = {"PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    if address:
        env["CONTAINERD_ADDRESS"] = address
    return env


def bash_argv(line: str) -> list[str]:
    return ["bash", "--norc", "--noprofile", "-c", BASH_COMPLETE, "bash", str(BASH_SCRIPT), line]


def fish_argv(line: str) -> list[str]:
    return ["fish", "--no-config", "-c", f"source {FISH_SCRIPT}; complete -C{line!r}"]


def programs_run(argv: Sequence[str], env: dict[str, str]) -> list[str]:
    """The programs a command runs, itself first, as strace sees each execve."""
    if shutil.which("strace") is None:
        return ["(strace not installed)"]
    with tempfile.NamedTemporaryFile("r", suffix=".trace") as trace:
        subprocess.run(["strace", "-f", "-qq", "-e", "trace=execve", "-o", trace.name, *argv],
                       env={**os.environ, **env}, check=True, capture_output=True)
        lines = [line for line in trace.read().splitlines() if "execve(" in line and "= 0" in line]
    return [Path(line.split('execve("', 1)[1].split('"', 1)[0]).name for line in lines]


def completes(argv: Sequence[str], env: dict[str, str]) -> list[str]:
    out = subprocess.run(argv, env={**os.environ, **env}, check=True, capture_output=True, text=True).stdout
    return [line.split("\t")[0] for line in out.splitlines() if line]


def bench_command_name(repeat: int) -> tuple[list[Row], list[str]]:
    env = shell_env()
    rows = [overhead_row(f"bash: `{COMMAND_LINE}<TAB>`, new shell", median_time(bash_argv(COMMAND_LINE), repeat, env),
                         "bash -c true", median_time(["bash", "--norc", "--noprofile", "-c", "true"], repeat), 0.020)]
    if shutil.which("fish"):
        rows.append(overhead_row(f"fish: `{COMMAND_LINE}<TAB>`, new shell",
                                 median_time(fish_argv(COMMAND_LINE), repeat, env),
                                 "fish -c true", median_time(["fish", "--no-config", "-c", "true"], repeat), 0.050))
    notes = [(f"`{COMMAND_LINE}<TAB>` offers {completes(bash_argv(COMMAND_LINE), env)}; programs run (strace execve): "
              f"bash: {programs_run(bash_argv(COMMAND_LINE), env)}")]
    if shutil.which("fish"):
        notes[-1] += f", fish: {programs_run(fish_argv(COMMAND_LINE), env)}"
    notes.append(in_shell(repeat * 200))
    return rows, notes


def in_shell(calls: int) -> str:
    """What one TAB costs in a shell that has the script loaded (too little for the table's ms)."""
    argv = ["bash", "--norc", "--noprofile", "-c", BASH_LOOP, "bash", str(BASH_SCRIPT), COMMAND_LINE, str(calls)]
    start, middle, end = (float(t) for t in subprocess.run(argv, check=True, capture_output=True, text=True).stdout.split())
    ours, peer = (middle - start) / calls * 1e6, (end - middle) / calls * 1e6
    return (f"bash, script loaded: `_pinctl` for `{COMMAND_LINE}` takes {ours:.0f} us per TAB "
            f"(a function that only sets COMPREPLY: {peer:.0f} us), averaged over {calls} calls")


def paired(ours: Sequence[str], peer: Sequence[str], repeat: int, env: dict[str, str]) -> tuple[float, float]:
    """Median times of two commands run in turns, so a slow spell of the daemon hits both alike."""
    run_once(ours, env)
    run_once(peer, env)
    times = [(run_once(ours, env), run_once(peer, env)) for _ in range(repeat)]
    return statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)


def bench_refs(count: int, repeat: int) -> tuple[list[Row], list[str]]:
    with containerd_with_images(count) as daemon, tempfile.TemporaryDirectory() as tmp:
        env = shell_env(daemon.address)
        ls = [PINCTL, "ls", "-q"]
        bash_ours, ls_time = paired(bash_argv(REF_LINE), ls, repeat, env)
        rows = [overhead_row(f"bash: `{REF_LINE}<TAB>`, {count} images", bash_ours, "pinctl ls -q", ls_time, 0.050)]
        if shutil.which("fish"):
            fish_ours, ls_time = paired(fish_argv(REF_LINE), ls, repeat, env)
            rows.append(overhead_row(f"fish: `{REF_LINE}<TAB>`, {count} images", fish_ours, "pinctl ls -q", ls_time,
                                     0.080))
        rows.append(bench_shell_side(Path(tmp), env, repeat))
        bare = median_time([sys.executable, "-c", "pass"], repeat)
        rows.append(overhead_row(f"bash: `{REF_LINE}<TAB>`, {count} images", bash_ours, "python -c pass", bare, 0.500))
        offered = completes(bash_argv(REF_LINE), env)
        notes = [(f"`{REF_LINE}<TAB>` offers {len(offered)} references ({offered[0]} ...); programs run: "
                  f"bash: {programs_run(bash_argv(REF_LINE), env)}")]
    return rows, notes


def bench_shell_side(tmp: Path, env: dict[str, str], repeat: int) -> Row:
    """The shell's own share of a REF completion: pinctl replaced by a replay of its output."""
    listing = tmp / "ls-q.txt"
    listing.write_bytes(subprocess.run([PINCTL, "ls", "-q"], env={**os.environ, **env}, check=True,
                                       capture_output=True).stdout)
    stand_in = tmp / "bin" / "pinctl"
    stand_in.parent.mkdir()
    stand_in.write_text(f"#!/bin/sh\nexec cat {listing}\n")
    stand_in.chmod(0o755)
    replay_env = {**env, "PATH": f"{stand_in.parent}:{env['PATH']}"}
    ours, peer = paired(bash_argv(REF_LINE), [str(stand_in)], repeat, replay_env)
    lines = len(listing.read_text().splitlines())
    return overhead_row(f"bash: the same, shell side only ({lines} refs replayed)", ours, "the replay alone", peer, 0.050)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=10)
    opts = parser.parse_args()
    rows, notes = bench_command_name(opts.repeat)
    ref_rows, ref_notes = bench_refs(opts.images, opts.repeat)
    print(report(rows + ref_rows))
    print()
    for note in notes + ref_notes:
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Shell completion scripts for bash, zsh and fish, generated from the click command tree.

The scripts are static: every command, option and choice is written into them, so completing
any of those starts no program at all. Only what lives in the engine is asked of pinctl:
image references (``pinctl ls -q``; for unpin only pinned ones, ``pinctl ls -q --pinned``) for
the REF arguments and namespaces (``pinctl namespaces -q``) for ``-n/--namespace``. Those calls
pass on the engine options already typed on the line, send errors to /dev/null and never fail
the completion.

- tree: the click tree as every script (and the man pages, docs/cli.md) sees it;
- calls: the calls to pinctl and the typed options they pass on, decided once for all shells;
- bash, zsh, fish: one renderer each, splicing generated tables into the static shell code of
  shell/ (package data; template reads and fills it).
"""

from __future__ import annotations

from typing import Callable, Sequence

import click

from pinctl.completion import bash, calls, fish, tree, zsh

SHELLS = ("bash", "zsh", "fish")
Renderer = Callable[[tree.CommandNode, Sequence[calls.Passed]], str]
_RENDERERS: dict[str, Renderer] = {"bash": bash.render, "zsh": zsh.render, "fish": fish.render}


def render(shell: str, root: click.Command) -> str:
    """The completion script for shell ("bash", "zsh" or "fish"); the same text on every run."""
    renderer = _RENDERERS.get(shell)
    if renderer is None:
        raise ValueError(f"unknown shell {shell!r}; choose one of {', '.join(SHELLS)}")
    node = tree.tree(root)
    return renderer(node, calls.passed_on(node))

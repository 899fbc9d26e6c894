"""Shell completion scripts generated from the click command tree (being written)."""

from __future__ import annotations

import click


def render(shell: str, root: click.Command) -> str:
    raise NotImplementedError(shell)

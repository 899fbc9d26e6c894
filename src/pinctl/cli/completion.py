"""pinctl completion."""

from __future__ import annotations

import click

from pinctl.cli.root import cli, exit_codes
from pinctl.errors import EXIT_OK


@cli.command("completion", epilog=exit_codes("0 ok", "2 unknown shell"))
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]), metavar="SHELL")
def completion_command(shell: str) -> int:
    """Print the completion script for SHELL.

    The script is static: completing commands and options starts no Python. Only image
    references and namespaces are asked of pinctl itself (pinctl ls -q, pinctl namespaces -q).
    """
    from pinctl import completion

    click.echo(completion.render(shell, cli), nl=False)
    return EXIT_OK

"""The command line: click only. Each command module parses its options, makes one call to
pinctl.commands, prints the result and returns its exit code; every failure becomes one line on
stderr and a documented exit code in run(), the one place errors are mapped to exits."""

from __future__ import annotations

import os
import sys
from typing import Any, Optional, Sequence, TextIO

import click

# The command modules register their commands on the root group as they are imported.
from pinctl.cli import check, completion, config, criproxy, gc, importing, ls, pin, pull, sync  # noqa: F401
from pinctl.cli.options import COMMON_OPTIONS_HEADING, SOURCE_OPTIONS, CommonOption, setting_options  # noqa: F401
from pinctl.cli.root import PinctlCommand, cli  # noqa: F401
from pinctl.errors import EXIT_ERROR, EXIT_OK, EXIT_PIPE, EXIT_USAGE, OutputClosed, OutputError, PinctlError

# click 8.2+ raises this for a group named without a subcommand; older click prints help itself.
NO_ARGS_IS_HELP: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())


def main(argv: Optional[Sequence[str]] = None) -> None:
    from pinctl import streams

    streams.install()
    sys.exit(run(argv))


def run(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI and turn every failure into one line on stderr and a documented exit code."""
    try:
        return _run(argv)
    except OutputClosed as err:  # from a command or from a handler's own message
        return _output_failed(err, quiet=True)
    except OutputError as err:
        return _output_failed(err, quiet=False)


def _run(argv: Optional[Sequence[str]]) -> int:
    try:
        code = cli.main(args=list(argv) if argv is not None else None, prog_name="pinctl", standalone_mode=False)
        sys.stdout.flush()  # here, not at exit: a write error must still reach the handlers below
        return code if isinstance(code, int) else EXIT_OK
    except NO_ARGS_IS_HELP as err:
        # A group named without its subcommand: show what it offers, as git does.
        click.echo(err.ctx.get_help() if err.ctx else err.format_message(), err=True)
        return EXIT_USAGE
    except click.UsageError as err:
        return _usage_error(err, err.ctx)
    except click.exceptions.Abort:
        return 130
    except (OutputClosed, OutputError):
        raise
    except PinctlError as err:
        click.echo(f"pinctl: {_visible(str(err))}", err=True)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _discard(sys.stdout)  # stdout without pinctl's guard (run() called in-process)
        return EXIT_PIPE
    except Exception as err:  # noqa: BLE001 - the last net: one line, not a traceback
        if os.environ.get("PINCTL_DEBUG"):
            raise
        click.echo(f"pinctl: internal error: {type(err).__name__}: {err} (rerun with PINCTL_DEBUG=1 and report it)",
                   err=True)
        return EXIT_ERROR


def _usage_error(err: click.UsageError, ctx: Optional[click.Context]) -> int:
    where = ctx.command_path if ctx else "pinctl"
    click.echo(f"pinctl: {_visible(err.format_message())} (see '{where} --help')", err=True)
    return EXIT_USAGE


def _visible(message: str) -> str:
    from pinctl.display import visible

    return visible(message)


def _output_failed(err: OutputClosed | OutputError, quiet: bool) -> int:
    """A closed pipe ends quietly; a failed write says so once, on the other stream when it can."""
    from pinctl import streams

    streams.discard(err.fd)  # what is still buffered for it goes nowhere, and the exit stays quiet
    if not quiet and err.fd != 2:
        try:
            click.echo(f"pinctl: {err}", err=True)
        except (OutputClosed, OutputError, OSError):
            pass
    return err.exit_code


def _discard(stream: TextIO) -> None:
    from pinctl import streams

    try:
        streams.discard(stream.fileno())
    except (OSError, ValueError):
        pass

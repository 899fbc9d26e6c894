"""The command line: click only. Each command module parses its options, makes one call to
pinctl.commands, prints the result and returns its exit code; every failure becomes one line on
stderr and a documented exit code in run(), the one place errors are mapped to exits."""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Optional, Sequence, TextIO

import click

# The command modules register their commands on the root group when it imports them, on first
# use (root.COMMAND_MODULES).
from pinctl.cli.options import COMMON_OPTIONS_HEADING, SOURCE_OPTIONS, CommonOption, setting_options  # noqa: F401
from pinctl.cli.root import PinctlCommand, cli  # noqa: F401
from pinctl.display import closest
from pinctl.errors import (EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_PIPE, EXIT_USAGE, OutputClosed, OutputError,
                           PinctlError)

# click 8.2+ raises this for a group named without a subcommand; older click prints help itself.
NO_ARGS_IS_HELP: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())


def main(argv: Optional[Sequence[str]] = None) -> None:
    # Imported here under another name: pinctl.cli.gc is the gc command's module.
    import gc as collector

    from pinctl import streams

    # A one-shot command's objects live until it exits: the cyclic collector would only walk them
    # again and again. The services turn it back on (pinctl/service/memory.py says why and how much).
    collector.disable()
    streams.install()
    sys.exit(run(argv))


def run(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI and turn every failure into one line on stderr and a documented exit code."""
    try:
        code = _run(argv)
        # Here, not at exit: what stdout still holds (all of it, into a pipe) goes out now, also
        # after a failure, so a closed pipe or a full disk reaches the handlers below.
        sys.stdout.flush()
        return code
    except OutputClosed as err:  # from a command or from a handler's own message
        return _output_failed(err, quiet=True)
    except OutputError as err:
        return _output_failed(err, quiet=False)
    except BrokenPipeError:  # stdout without pinctl's guard (run() called in-process)
        _discard(sys.stdout)
        return EXIT_PIPE


def _run(argv: Optional[Sequence[str]]) -> int:
    try:
        code = cli.main(args=list(argv) if argv is not None else None, prog_name="pinctl", standalone_mode=False)
        return code if isinstance(code, int) else EXIT_OK
    except NO_ARGS_IS_HELP as err:
        # A group named without its subcommand: show what it offers, as git does.
        click.echo(err.ctx.get_help() if err.ctx else err.format_message(), err=True)
        return EXIT_USAGE
    except click.UsageError as err:
        return _usage_error(err, err.ctx)
    except click.exceptions.Abort:
        return EXIT_INTERRUPTED
    except (OutputClosed, OutputError):
        raise
    except PinctlError as err:
        _say(f"pinctl: {_visible(str(err))}")
        return err.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
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
    _say(f"pinctl: {_visible(_usage_message(err))} (see '{where} --help')")
    return EXIT_USAGE


def _say(line: str) -> None:
    """The one line a failure ends with, folded to a terminal's width (whole into a pipe or log)."""
    from pinctl.render.output import folded

    click.echo(folded(line, sys.stderr), err=True)


def _usage_message(err: click.UsageError) -> str:
    """click's message, with a typo's suggestions in one clause of pinctl's own (click's come in
    parentheses of their own, and from difflib, which offers --quiet for --unpined)."""
    no_such_command: Any = getattr(click.exceptions, "NoSuchCommand", ())  # click 8.4+
    if isinstance(err, click.NoSuchOption):
        what, name = "option", err.option_name
    elif isinstance(err, no_such_command):
        what, name = "command", err.command_name
    elif isinstance(err, click.BadParameter) and isinstance(getattr(err.param, "type", None), click.Choice):
        return _choice_message(err)
    else:
        # click (8.5) writes a choice's list with "\n\t" between items, escaped in the text it
        # gives: one line of pinctl's, with plain commas, instead.
        return " ".join(err.format_message().replace("\\n\\t", " ").split())
    close = closest(name, _candidates(err.ctx, what) or err.possibilities or ())
    return f"no such {what} '{name}'" + (f"; did you mean {' or '.join(close)}?" if close else "")


def _choice_message(err: click.BadParameter) -> str:
    """'-o/--output takes table, wide or json, not 'jsn'; did you mean json?': the value typed
    is only in click's text, so it is read from there."""
    param: Any = err.param
    choices = [str(choice) for choice in param.type.choices]
    typed = re.search(r"'([^']*)' is not one of", err.format_message())
    if typed is None:
        return " ".join(err.format_message().replace("\\n\\t", " ").split())
    names = "/".join(param.opts) if isinstance(param, click.Option) else param.human_readable_name
    listed = ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]
    close = closest(typed.group(1), choices)
    return f"{names} takes {listed}, not '{typed.group(1)}'" + (f"; did you mean {' or '.join(close)}?" if close else "")


def _candidates(ctx: Optional[click.Context], what: str) -> list[str]:
    """Every name the typo could have meant: the group's commands, or the command's options."""
    if ctx is None:
        return []
    if what == "command":
        return list(ctx.command.list_commands(ctx)) if isinstance(ctx.command, click.Group) else []
    return [name for param in ctx.command.get_params(ctx) if isinstance(param, click.Option)
            for name in (*param.opts, *param.secondary_opts)]


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

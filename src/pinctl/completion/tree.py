"""The click command tree as completion scripts and man pages see it.

``tree`` reduces the click commands to what every shell needs: names, one-line help, options
with what their values complete to, arguments and subcommands. ``contexts``, ``command_path``,
``option_names`` and ``summary`` are the same walk and the same wording for the man pages and
docs/cli.md (tools/manpages.py, tools/generate.py), so the three never disagree on a command.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import click

PROG = "pinctl"
# Commands whose REF arguments complete to pinned references only: unpinning any other does nothing.
PINNED_REFS_COMMANDS = frozenset({("unpin",)})
# Commands whose REF arguments complete to the names the deletion journal holds.
DELETED_REFS_COMMANDS = frozenset({("history",)})
NAMESPACE_OPTION = "--namespace"
_PATH_METAVARS = frozenset({"PATH", "FILE", "DIR", "SOCKET"})
# Words written into the scripts unquoted (names, choices): nothing a shell would expand.
_SAFE_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/+,@%=-]*|--?[A-Za-z0-9][A-Za-z0-9_-]*")
_DESCRIPTION_LIMIT = 90


@dataclass(frozen=True)
class Value:
    """What an option's value or an argument completes to.

    kind is "words" (the choices in words), "files", "refs" (asked of pinctl ls -q),
    "pinned-refs" (asked of pinctl ls -q --pinned), "deleted-refs" (asked of pinctl history -q
    --all), "namespaces" (asked of pinctl
    namespaces -q) or "none". optional is true for click options that may be given bare
    (--from-crio or --from-crio PATH).
    """

    kind: str
    label: str
    words: tuple[str, ...] = ()
    optional: bool = False


@dataclass(frozen=True)
class Opt:
    """One option: its names, a one-line description and its value (None for a flag)."""

    names: tuple[str, ...]
    help: str
    value: Optional[Value]
    repeat: bool
    final: bool  # --help, --version: nothing else follows


@dataclass(frozen=True)
class Arg:
    """One positional argument; many for nargs=-1."""

    value: Value
    many: bool


@dataclass(frozen=True)
class CommandNode:
    """One command: path from the program name, one-line help, options, arguments, subcommands."""

    path: tuple[str, ...]
    help: str
    opts: tuple[Opt, ...]
    args: tuple[Arg, ...]
    children: tuple[CommandNode, ...]

    @property
    def key(self) -> str:
        return " ".join(self.path)

    def walk(self) -> Iterator[CommandNode]:
        yield self
        for child in self.children:
            yield from child.walk()


def contexts(root: click.Command, prog: str = PROG, **settings: Any) -> Iterator[click.Context]:
    """A context for every visible command, parents first, subcommands in click's order.

    settings (e.g. terminal_width) go to every context, after the command's own settings.
    """
    yield from _contexts(root, click.Context(root, info_name=prog, **{**root.context_settings, **settings}), settings)


def _contexts(command: click.Command, ctx: click.Context, settings: dict[str, Any]) -> Iterator[click.Context]:
    yield ctx
    if not isinstance(command, click.Group):
        return
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        if sub is None or sub.hidden:
            continue
        child = click.Context(sub, info_name=name, parent=ctx, **{**sub.context_settings, **settings})
        yield from _contexts(sub, child, settings)


def command_path(ctx: click.Context) -> tuple[str, ...]:
    """("pinctl", "config", "show") for pinctl config show."""
    names: list[str] = []
    current: Optional[click.Context] = ctx
    while current is not None:
        names.append(current.info_name or "")
        current = current.parent
    return tuple(reversed(names))


def tree(root: click.Command, prog: str = PROG) -> CommandNode:
    """The command tree as the completion scripts see it."""
    nodes: dict[tuple[str, ...], CommandNode] = {}
    for ctx in reversed(list(contexts(root, prog))):  # children before their parent
        path = command_path(ctx)
        children = tuple(nodes[p] for p in _child_paths(ctx, path))
        nodes[path] = _node(ctx, path, children)
    return nodes[(prog,)]


def _child_paths(ctx: click.Context, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    command = ctx.command
    if not isinstance(command, click.Group):
        return []
    names = command.list_commands(ctx)
    return [(*path, n) for n in names if (c := command.get_command(ctx, n)) is not None and not c.hidden]


def _node(ctx: click.Context, path: tuple[str, ...], children: tuple[CommandNode, ...]) -> CommandNode:
    params = [p for p in ctx.command.get_params(ctx) if not getattr(p, "hidden", False)]
    opts = tuple(_option(p) for p in params if isinstance(p, click.Option))
    args = tuple(Arg(_argument_value(p, path), p.nargs == -1) for p in params if isinstance(p, click.Argument))
    for word in (path[-1], *(n for o in opts for n in o.names)):
        _check_word(word)
    return CommandNode(path, summary(ctx.command.help or ctx.command.short_help or ""), opts, args, children)


def option_names(param: click.Option) -> tuple[str, ...]:
    """Short names before long ones: click's own order differs between its versions."""
    return tuple(sorted((*param.opts, *param.secondary_opts), key=lambda n: (n.startswith("--"), n)))


def _option(param: click.Option) -> Opt:
    names = option_names(param)
    value = None if param.is_flag or param.count else _value(param)
    final = param.is_eager and not param.expose_value  # --help and --version act and exit
    return Opt(names, summary(param.help or ""), value, bool(param.multiple or param.count), final)


def _value(param: click.Parameter) -> Value:
    label = _label(param)
    optional = bool(getattr(param, "_flag_needs_value", False))
    if isinstance(param.type, click.Choice):
        words = tuple(str(choice) for choice in param.type.choices)
        for word in words:
            _check_word(word)
        return Value("words", label, words, optional)
    if NAMESPACE_OPTION in getattr(param, "opts", ()):
        return Value("namespaces", label, optional=optional)
    if isinstance(param, click.Argument) and re.search(r"\bREF\b", label):
        return Value("refs", label, optional=optional)
    if isinstance(param.type, click.Path) or label in _PATH_METAVARS:
        return Value("files", label, optional=optional)
    return Value("none", label, optional=optional)


def _argument_value(param: click.Argument, path: tuple[str, ...]) -> Value:
    value = _value(param)
    if value.kind == "refs" and path[1:] in PINNED_REFS_COMMANDS:
        return dataclasses.replace(value, kind="pinned-refs")
    if value.kind == "refs" and path[1:] in DELETED_REFS_COMMANDS:
        return dataclasses.replace(value, kind="deleted-refs")
    return value


def _label(param: click.Parameter) -> str:
    """What the value is called: the metavar without its brackets, else a name."""
    if param.metavar:
        return param.metavar.replace("...", "").strip("[]") or param.metavar
    if isinstance(param, click.Option):
        longest = max(param.opts, key=len)
        return longest.lstrip("-").upper()
    return (param.name or "ARG").upper()


def summary(text: str, limit: int = _DESCRIPTION_LIMIT) -> str:
    """The first sentence of a help text on one line, without its full stop."""
    flat = " ".join(inspect.cleandoc(text).partition("\f")[0].split())
    end = re.search(r"[.!?](?=\s|$)", flat)
    sentence = flat[: end.start()] if end else flat
    if len(sentence) > limit:
        sentence = sentence[: limit - 3].rsplit(" ", 1)[0] + "..."
    return sentence


def _check_word(word: str) -> None:
    # Names and choices go into the scripts unquoted; refuse what a shell would expand.
    if not _SAFE_WORD.fullmatch(word):
        raise ValueError(f"{word!r} cannot be written into a completion script")


def is_short(name: str) -> bool:
    """A one-letter name such as -n: shells let its value follow in the same word (-nk8s.io)."""
    return len(name) == 2 and name[0] == "-" and name[1] != "-"

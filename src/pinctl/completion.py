"""Shell completion scripts for bash, zsh and fish, generated from the click command tree.

The scripts are static: every command, option and choice is written into them, so completing
any of those starts no program at all. Only what lives in the engine is asked of pinctl:
image references (``pinctl ls -q``; for unpin only pinned ones, ``pinctl ls -q --pinned``) for
the REF arguments and namespaces (``pinctl namespaces -q``) for ``-n/--namespace``. Those calls
pass on the engine options already typed on the line, send errors to /dev/null and never fail
the completion.

The same walk of the tree serves the man pages and docs/cli.md (see ``contexts``).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import click

from pinctl import __version__

PROG = "pinctl"
SHELLS = ("bash", "zsh", "fish")
REFS_CALL = ("ls", "-q")
PINNED_REFS_CALL = ("ls", "-q", "--pinned")
# Commands whose REF arguments complete to pinned references only: unpinning any other does nothing.
PINNED_REFS_COMMANDS = frozenset({("unpin",)})
NAMESPACES_CALL = ("namespaces", "-q")
# Options that choose the engine or config a dynamic call reads: typed ones are passed on.
PASS_THROUGH = ("--address", "--timeout", "--config", "--docker-host")
NAMESPACE_OPTION = "--namespace"
_PATH_METAVARS = frozenset({"PATH", "FILE", "DIR", "SOCKET"})
# Words written into the scripts unquoted (names, choices): nothing a shell would expand.
_SAFE_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/+,@%=-]*|--?[A-Za-z0-9][A-Za-z0-9_-]*")
_DESCRIPTION_LIMIT = 90
_HEADER = "Generated from pinctl {version}'s command tree by tools/generate.py; do not edit."


# -- the model: what every shell needs to know about the tree ---------------------------


@dataclass(frozen=True)
class Value:
    """What an option's value or an argument completes to.

    kind is "words" (the choices in words), "files", "refs" (asked of pinctl ls -q),
    "pinned-refs" (asked of pinctl ls -q --pinned), "namespaces" (asked of pinctl
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

    @property
    def short(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if _is_short(n))


@dataclass(frozen=True)
class Arg:
    """One positional argument; many for nargs=-1."""

    value: Value
    many: bool


@dataclass(frozen=True)
class Node:
    """One command: path from the program name, one-line help, options, arguments, subcommands."""

    path: tuple[str, ...]
    help: str
    opts: tuple[Opt, ...]
    args: tuple[Arg, ...]
    children: tuple[Node, ...]

    @property
    def key(self) -> str:
        return " ".join(self.path)

    def walk(self) -> Iterator[Node]:
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


def tree(root: click.Command, prog: str = PROG) -> Node:
    """The command tree as the completion scripts see it."""
    nodes: dict[tuple[str, ...], Node] = {}
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


def _node(ctx: click.Context, path: tuple[str, ...], children: tuple[Node, ...]) -> Node:
    params = [p for p in ctx.command.get_params(ctx) if not getattr(p, "hidden", False)]
    opts = tuple(_option(p) for p in params if isinstance(p, click.Option))
    args = tuple(Arg(_argument_value(p, path), p.nargs == -1) for p in params if isinstance(p, click.Argument))
    for word in (path[-1], *(n for o in opts for n in o.names)):
        _check_word(word)
    return Node(path, summary(ctx.command.help or ctx.command.short_help or ""), opts, args, children)


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


def _is_short(name: str) -> bool:
    return len(name) == 2 and name[0] == "-" and name[1] != "-"


@dataclass(frozen=True)
class Passed:
    """An option typed on the line that the calls to pinctl repeat, always as LONG=VALUE."""

    long: str
    names: tuple[str, ...]

    @property
    def shorts(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if _is_short(n))

    @property
    def refs_only(self) -> bool:
        """The namespaces narrow image references; namespaces themselves are listed from all."""
        return self.long == NAMESPACE_OPTION


def _passed_options(root: Node) -> list[Passed]:
    """The root's options that choose the engine or config, then --namespace."""
    found = []
    for opt in root.opts:
        longs = [n for n in opt.names if n.startswith("--")]
        if longs and (longs[0] in PASS_THROUGH or longs[0] == NAMESPACE_OPTION):
            found.append(Passed(longs[0], opt.names))
    return sorted(found, key=lambda passed: (passed.refs_only, passed.long))


# -- rendering -----------------------------------------------------------------------------


def render(shell: str, root: click.Command) -> str:
    """The completion script for shell ("bash", "zsh" or "fish"); the same text on every run."""
    renderer = _RENDERERS.get(shell)
    if renderer is None:
        raise ValueError(f"unknown shell {shell!r}; choose one of {', '.join(SHELLS)}")
    return renderer(tree(root))


def _sq(text: str) -> str:
    """text in POSIX single quotes (bash, zsh)."""
    return "'" + text.replace("'", "'\\''") + "'"


def _function_name(prefix: str, node: Node) -> str:
    """prefix, then _part for each command below the program: _pinctl_cmd_config_show."""
    return prefix + "".join("_" + re.sub(r"[^A-Za-z0-9]", "_", part) for part in node.path[1:])


# -- bash ------------------------------------------------------------------------------------

_BASH_MAIN = r"""
# _pinctl_add WORD CANDIDATE...: offer the candidates that start with WORD.
_pinctl_add() {
    local word=$1 candidate
    shift
    for candidate; do
        [[ $candidate == "$word"* ]] && COMPREPLY+=("$candidate")
    done
}

# _pinctl_ask WORD ARG...: offer the lines of `pinctl ARG...` that start with WORD. A dead socket
# or a missing permission must not print into the prompt, so errors go to /dev/null.
_pinctl_ask() {
    local word=$1 out
    shift
    out=$("$prog" "$@" "${pass[@]}" 2>/dev/null </dev/null)
    [[ -n $out ]] || return 0
    local -a lines
    mapfile -t lines <<<"$out"
    _pinctl_add "$word" "${lines[@]}"
}

# _pinctl_files: let readline complete file names (it quotes them and marks directories).
_pinctl_files() {
    compopt -o default 2>/dev/null
}

# _pinctl_option WORD: note an option typed before the cursor; the next word may be its value.
_pinctl_option() {
    _pinctl_node "$node"
    case $1 in
    --*=*) _pinctl_keep "${1%%=*}" "${1#*=}" ;;
    --*) [[ $valued == *" $1 "* ]] && pending=$1 ;;
    *)
        if [[ $valued == *" ${1:0:2} "* ]]; then
            if ((${#1} > 2)); then _pinctl_keep "${1:0:2}" "${1:2}"; else pending=$1; fi
        fi
        ;;
    esac
}

# _pinctl_trim WORD: readline replaces only the text after the last '=' or ':' it breaks words
# at, so drop what comes before it from the candidates (refs hold ':').
_pinctl_trim() {
    local tail=$1
    [[ $COMP_WORDBREAKS == *=* ]] && tail=${tail##*=}
    [[ $COMP_WORDBREAKS == *:* ]] && tail=${tail##*:}
    local head=${1%"$tail"}
    if [[ -n $head && ${#COMPREPLY[@]} -gt 0 ]]; then
        COMPREPLY=("${COMPREPLY[@]#"$head"}")
    fi
}

_pinctl() {
    COMPREPLY=()
    local IFS=$' \t\n' line=${COMP_LINE:0:COMP_POINT}
    local -a words pass=() nspass=()
    read -r -a words <<<"$line"
    # A blank before the cursor starts a new, empty word.
    [[ -z $line || $line == *[[:blank:]] ]] && words+=('')
    local cur=${words[${#words[@]} - 1]} prog=${words[0]} quoted=''
    [[ $prog == */* && -x $prog ]] || prog=pinctl
    # An opening quote is not part of the word readline completes.
    if [[ $cur == [\'\"]* ]]; then
        cur=${cur:1}
        quoted=1
    fi
    local node=pinctl subs valued optval opts pending='' word only_args='' i n=0
    for ((i = 1; i < ${#words[@]} - 1; i++)); do
        word=${words[i]}
        if [[ -n $pending ]] && ! [[ $word == -?* && $optval == *" $pending "* ]]; then
            _pinctl_keep "$pending" "$word"
            pending=''
            continue
        fi
        pending=''
        if [[ -z $only_args && $word == -- ]]; then
            only_args=1
        elif [[ -z $only_args && $word == -?* ]]; then
            _pinctl_option "$word"
        else
            _pinctl_node "$node"
            if [[ -z $only_args && " $subs " == *" $word "* ]]; then
                node+=" $word"
                n=0
            else
                n=$((n + 1))
            fi
        fi
    done
    _pinctl_node "$node"
    if [[ -n $pending ]] && ! [[ $cur == -?* && $optval == *" $pending "* ]]; then
        _pinctl_value "$node|$pending" "$cur"
    elif [[ -z $only_args && $cur == --*=* ]]; then
        _pinctl_value "$node|${cur%%=*}" "${cur#*=}"
        ((${#COMPREPLY[@]})) && COMPREPLY=("${COMPREPLY[@]/#/${cur%%=*}=}")
    elif [[ -z $only_args && $cur == -* ]]; then
        _pinctl_add "$cur" $opts
    elif [[ -n $subs ]]; then
        _pinctl_add "$cur" $subs
    else
        _pinctl_value "$node|#$n" "$cur"
    fi
    [[ -n $quoted ]] || _pinctl_trim "$cur"
    return 0
}

complete -F _pinctl pinctl
"""


def _bash(root: Node) -> str:
    header = [
        "# bash completion for pinctl                                 -*- shell-script -*-",
        "# " + _HEADER.format(version=__version__),
        "# Install: $(PREFIX)/share/bash-completion/completions/pinctl, or: source <(pinctl completion bash)",
        "# Works with and without the bash-completion package. Completing commands, options and",
        "# choices runs no program; image references and namespaces are asked of pinctl.",
    ]
    body = [_bash_nodes(root), _bash_keep(root), _bash_values(root), _BASH_MAIN]
    return "\n".join(header) + "\n\n" + "\n".join(body)


def _bash_nodes(root: Node) -> str:
    lines = [
        "# _pinctl_node PATH: the subcommands, the options taking a value (optval: those that may go",
        "# without one) and all the options of one command, padded with blanks for a cheap lookup.",
        "_pinctl_node() {",
        "    case $1 in",
    ]
    for node in root.walk():
        valued = [n for o in node.opts if o.value for n in o.names]
        optval = [n for o in node.opts if o.value and o.value.optional for n in o.names]
        lines += [
            f"    {_sq(node.key)})",
            f"        subs={_sq(' '.join(c.path[-1] for c in node.children))}",
            f"        valued={_sq(' ' + ' '.join(valued) + ' ')}",
            f"        optval={_sq(' ' + ' '.join(optval) + ' ')}",
            f"        opts={_sq(' '.join(n for o in node.opts for n in o.names))}",
            "        ;;",
        ]
    lines += ["    *) subs='' valued=' ' optval=' ' opts='' ;;", "    esac", "}", ""]
    return "\n".join(lines)


def _bash_keep(root: Node) -> str:
    arms = [
        f'    {"|".join(p.names)}) {"nspass" if p.refs_only else "pass"}+=("{p.long}=$value") ;;'
        for p in _passed_options(root)
    ]
    return "\n".join([
        "# _pinctl_keep OPTION VALUE: keep the typed options that choose the engine, for the calls to",
        "# pinctl (namespaces only for image references). Quotes go, as the shell would remove them;",
        "# nothing typed is ever evaluated.",
        "_pinctl_keep() {",
        "    local value=$2",
        "    [[ $value == \\'*\\' || $value == \\\"*\\\" ]] && value=${value:1:${#value}-2}",
        "    case $1 in",
        *arms,
        "    esac",
        "}",
        "",
    ])


def _bash_values(root: Node) -> str:
    actions: dict[str, list[str]] = {}
    for pattern, action in _bash_value_cases(root):
        actions.setdefault(action, []).append(pattern)
    lines = [
        "# _pinctl_value KEY WORD: complete an option's value (KEY is 'PATH|OPTION') or a positional",
        "# argument (KEY is 'PATH|#N', N counting from 0) that starts with WORD.",
        "_pinctl_value() {",
        "    case $1 in",
    ]
    for action, patterns in actions.items():
        lines += [f"    {'|'.join(patterns)})", f"        {action} ;;"]
    lines += ["    esac", "}", ""]
    return "\n".join(lines)


def _bash_value_cases(root: Node) -> list[tuple[str, str]]:
    """(case pattern, action) for every option value and argument, in tree order."""
    actions_of = _option_actions(root)
    cases: list[tuple[str, str]] = []
    done: set[str] = set()
    for node in root.walk():
        for name, action in _option_values(node):
            if len(actions_of[name]) > 1:  # e.g. -o: other choices in other commands
                cases.append((_sq(f"{node.key}|{name}"), action))
            elif name not in done:  # the same everywhere: one pattern for every command
                cases.append(("*" + _sq("|" + name), action))
                done.add(name)
        cases += _bash_arg_cases(node)
    return cases


def _option_values(node: Node) -> list[tuple[str, str]]:
    """(option name, bash action) for each option of node that takes a value."""
    return [(name, _bash_action(opt.value)) for opt in node.opts if opt.value is not None for name in opt.names]


def _option_actions(root: Node) -> dict[str, set[str]]:
    """Every action each option name has anywhere in the tree."""
    found: dict[str, set[str]] = {}
    for node in root.walk():
        for name, action in _option_values(node):
            found.setdefault(name, set()).add(action)
    return found


def _bash_arg_cases(node: Node) -> list[tuple[str, str]]:
    cases = []
    for index, arg in enumerate(node.args):
        key = _sq(f"{node.key}|#") + ("*" if arg.many else str(index))
        cases.append((key, _bash_action(arg.value)))
    return cases


def _bash_action(value: Value) -> str:
    if value.kind == "words":
        return '_pinctl_add "$2" ' + " ".join(value.words)
    if value.kind == "files":
        return "_pinctl_files"
    if value.kind == "refs":
        return '_pinctl_ask "$2" ' + " ".join(REFS_CALL) + ' "${nspass[@]}"'
    if value.kind == "pinned-refs":
        return '_pinctl_ask "$2" ' + " ".join(PINNED_REFS_CALL) + ' "${nspass[@]}"'
    if value.kind == "namespaces":
        return '_pinctl_ask "$2" ' + " ".join(NAMESPACES_CALL)
    return ":"


# -- zsh -------------------------------------------------------------------------------------

_ZSH_ASK = r"""
# _pinctl_ask KIND ARG...: run pinctl ARG... with the engine options typed on the line (and for
# KIND refs the namespaces too). Errors go to /dev/null: completion must stay quiet.
_pinctl_ask() {
  local kind=$1 prog=${_pinctl_words[1]:-pinctl} word
  local -a pass
  local -i i
  shift
  # An option is being typed, not a value: starting pinctl would only slow the prompt.
  [[ $PREFIX == -* ]] && return 1
  [[ $prog == */* && -x ${~prog} ]] && prog=${~prog} || prog=pinctl
  (( $+commands[$prog] )) || [[ -x $prog ]] || return 1
  for (( i = 2; i <= $#_pinctl_words; i++ )); do
    (( i == _pinctl_current )) && continue
    word=$_pinctl_words[i]
    case $word in
@ARMS@
    esac
  done
  $prog "$@" "${pass[@]}" 2>/dev/null </dev/null
}

_pinctl_refs() {
  local -a refs expl
  refs=(${(f)"$(_pinctl_ask refs @REFS@)"})
  _wanted images expl 'image reference' compadd -a refs
}

_pinctl_pinned_refs() {
  local -a refs expl
  refs=(${(f)"$(_pinctl_ask refs @PINNED_REFS@)"})
  _wanted images expl 'pinned image reference' compadd -a refs
}

_pinctl_namespaces() {
  local -a names expl
  names=(${(f)"$(_pinctl_ask namespaces @NAMESPACES@)"})
  _wanted namespaces expl 'containerd namespace' compadd -a names
}

_pinctl() {
  # Nested _arguments shift $words; the typed engine options are read from the whole line.
  local -a _pinctl_words=("${words[@]}")
  local -i _pinctl_current=$CURRENT
  @ROOT@ "$@"
}

# Autoloaded from $fpath, this file is the body of _pinctl: define, then complete. Sourced
# (source <(pinctl completion zsh), after compinit), it registers itself.
if [[ $funcstack[1] == _pinctl ]]; then
  _pinctl "$@"
else
  compdef _pinctl pinctl
fi
"""


def _zsh(root: Node) -> str:
    header = [
        "#compdef pinctl",
        "# zsh completion for pinctl. " + _HEADER.format(version=__version__),
        "# Install as _pinctl in a directory of $fpath ($(PREFIX)/share/zsh/site-functions), or:",
        "# source <(pinctl completion zsh) after compinit. Completing commands, options and choices",
        "# runs no program; image references and namespaces are asked of pinctl.",
        "",
    ]
    functions = [_zsh_command(node) for node in root.walk()]
    tail = (_ZSH_ASK.replace("@ARMS@", _zsh_arms(root))
            .replace("@REFS@", " ".join(REFS_CALL))
            .replace("@PINNED_REFS@", " ".join(PINNED_REFS_CALL))
            .replace("@NAMESPACES@", " ".join(NAMESPACES_CALL))
            .replace("@ROOT@", _function_name("_pinctl_cmd", root)))
    return "\n".join(header) + "\n".join(functions) + tail


def _zsh_command(node: Node) -> str:
    specs = [_zsh_option(opt) for opt in node.opts]
    specs += _zsh_args(node)
    name = _function_name("_pinctl_cmd", node)
    lines = [f"{name}() {{"]
    if node.children:
        lines += ["  local curcontext=$curcontext state state_descr line ret=1", "  local -A opt_args"]
        specs += [f"'1:command:{_function_name('_pinctl_subcommands', node)}'", "'*:: :->command'"]
    # -A: a group's own options end at its subcommand, so `pin -a SOCKET REF` reaches pin's spec.
    lines.append("  _arguments -s -S" + (" -C -A '-*'" if node.children else "") + " \\")
    lines += [f"    {spec} \\" for spec in specs[:-1]] + [f"    {specs[-1]}" + (" && ret=0" if node.children else "")]
    if node.children:
        lines += _zsh_dispatch(node)
    lines.append("}")
    if node.children:
        lines += ["", *_zsh_commands(node)]
    return "\n".join(lines) + "\n\n"


def _zsh_dispatch(node: Node) -> list[str]:
    lines = [
        "  case $state in",
        "  (command)",
        f"    curcontext=${{curcontext%:*:*}}:{'-'.join(node.path)}-$words[1]:",
        "    case $words[1] in",
    ]
    lines += [f"    ({child.path[-1]}) {_function_name('_pinctl_cmd', child)} && ret=0 ;;" for child in node.children]
    lines += ["    esac", "    ;;", "  esac", "  return ret"]
    return lines


def _zsh_commands(node: Node) -> list[str]:
    items = [_sq(f"{child.path[-1]}:{child.help}") for child in node.children]
    return [
        f"{_function_name('_pinctl_subcommands', node)}() {{",
        "  local -a commands=(",
        *[f"    {item}" for item in items],
        "  )",
        f"  _describe -t commands {_sq(node.key + ' command')} commands",
        "}",
    ]


def _zsh_option(opt: Opt) -> str:
    if opt.final:
        exclusions = "(- *)"
    elif opt.repeat:
        exclusions = "*"
    else:
        exclusions = "(" + " ".join(opt.names) + ")"
    description = "[" + _zsh_bracket(opt.help) + "]"
    action = _zsh_value(opt.value, ":" if opt.value and opt.value.optional else "") if opt.value else ""
    names = [name + _zsh_suffix(name, opt.value) for name in opt.names]
    if len(names) == 1:
        return _sq(exclusions + names[0] + description + action)
    # Brace expansion gives each name the same spec: '(-o --output)'{-o+,--output=}'[...]...'
    return _sq(exclusions) + "{" + ",".join(names) + "}" + _sq(description + action)


def _zsh_suffix(name: str, value: Optional[Value]) -> str:
    # -n+: value in the same word or the next; --name=: after '=' or in the next word.
    if value is None:
        return ""
    return "+" if _is_short(name) else "="


def _zsh_args(node: Node) -> list[str]:
    specs = []
    for index, arg in enumerate(node.args, 1):
        position = "*" if arg.many else str(index)
        specs.append(_sq(position) + _sq(_zsh_value(arg.value, "")))
    return specs


def _zsh_value(value: Value, optional: str) -> str:
    message = value.label.replace("\\", "\\\\").replace(":", "\\:")
    actions = {
        "words": "(" + " ".join(value.words) + ")",
        "files": "_files",
        "refs": "_pinctl_refs",
        "pinned-refs": "_pinctl_pinned_refs",
        "namespaces": "_pinctl_namespaces",
        "none": " ",
    }
    return f":{optional}{message}:{actions[value.kind]}"


def _zsh_bracket(text: str) -> str:
    return text.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


def _zsh_arms(root: Node) -> str:
    lines = []
    for passed in _passed_options(root):
        only = "[[ $kind == refs ]] && " if passed.refs_only else ""
        lines += [
            f"    ({'|'.join(passed.names)})",
            f'      {only}pass+=("{passed.long}=${{(Q)_pinctl_words[i+1]}}"); (( i++ )) ;;',
            f"    ({passed.long}=*)",
            f'      {only}pass+=("{passed.long}=${{(Q)${{word#*=}}}}") ;;',
        ]
        lines += [f"    ({short}?*)\n      {only}pass+=(\"{passed.long}=${{(Q)word[3,-1]}}\") ;;"
                  for short in passed.shorts]
    return "\n".join(lines)


# -- fish ------------------------------------------------------------------------------------

_FISH_ASK = r"""
# Run pinctl with the engine options typed on the line (for refs the namespaces too); errors go
# to /dev/null, since completion must stay quiet when there is no daemon.
function __fish_pinctl_ask --argument-names kind
    set -e argv[1]
    # An option is being typed, not a value: starting pinctl would only slow the prompt.
    string match -q -- '-*' (commandline -ct); and return 0
    set -l words (commandline -opc)
    set -l prog pinctl
    if string match -q -- '*/*' $words[1]; and test -x $words[1]
        set prog $words[1]
    end
    set -l pass
    set -l i 2
    while test $i -le (count $words)
        set -l word $words[$i]
        set -l next $words[(math $i + 1)]
        switch $word
@ARMS@
        end
        set i (math $i + 1)
    end
    command -q $prog; or return 0
    command $prog $argv $pass 2>/dev/null </dev/null
end

function __fish_pinctl_refs --description 'Image references pinctl ls -q lists'
    __fish_pinctl_ask refs @REFS@
end

function __fish_pinctl_pinned_refs --description 'Pinned image references pinctl ls -q --pinned lists'
    __fish_pinctl_ask refs @PINNED_REFS@
end

function __fish_pinctl_namespaces --description 'containerd namespaces pinctl namespaces -q lists'
    __fish_pinctl_ask namespaces @NAMESPACES@
end
"""


def _fish(root: Node) -> str:
    lines = [
        "# fish completion for pinctl. " + _HEADER.format(version=__version__),
        "# Install: $(PREFIX)/share/fish/vendor_completions.d/pinctl.fish, or: pinctl completion fish | source",
        "# Completing commands, options and choices runs no program; image references and",
        "# namespaces are asked of pinctl.",
        _FISH_ASK.replace("@ARMS@", _fish_arms(root))
        .replace("@REFS@", " ".join(REFS_CALL))
        .replace("@PINNED_REFS@", " ".join(PINNED_REFS_CALL))
        .replace("@NAMESPACES@", " ".join(NAMESPACES_CALL)),
        "# Sourcing twice must not double every line.",
        "complete -c pinctl -e",
        "# Arguments are commands and image references, never file names (values may be).",
        "complete -c pinctl -f",
    ]
    for node in root.walk():
        lines += ["", f"# {node.key}", *_fish_node(node)]
    return "\n".join(lines) + "\n"


def _fish_node(node: Node) -> list[str]:
    condition = _fish_condition(node)
    lines = [_fish_line(condition, f"-a {child.path[-1]}", child.help) for child in node.children]
    lines += [_fish_line(condition, _fish_option(opt), opt.help) for opt in node.opts]
    for arg in node.args:
        lines.append(_fish_line(condition, _fish_arg(arg.value), ""))
    return lines


def _fish_condition(node: Node) -> str:
    seen = [f"__fish_seen_subcommand_from {name}" for name in node.path[1:]]
    if node.children:
        seen.append("not __fish_seen_subcommand_from " + " ".join(c.path[-1] for c in node.children))
    return "; and ".join(seen)


def _fish_line(condition: str, what: str, description: str) -> str:
    parts = ["complete -c pinctl"]
    if condition:
        parts.append("-n " + _fish_quote(condition))
    parts.append(what)
    if description:
        parts.append("-d " + _fish_quote(description))
    return " ".join(parts)


def _fish_option(opt: Opt) -> str:
    parts = []
    for name in opt.names:
        if name.startswith("--"):
            parts.append(f"-l {name[2:]}")
        elif _is_short(name):
            parts.append(f"-s {name[1:]}")
        else:
            parts.append(f"-o {name[1:]}")
    if opt.value:
        parts.append(_fish_value(opt.value))
    return " ".join(parts)


def _fish_value(value: Value) -> str:
    if value.kind == "files":
        return "-r -F"
    if value.kind == "words":
        return "-x -a " + _fish_quote(" ".join(value.words))
    if value.kind == "namespaces":
        return "-x -a '(__fish_pinctl_namespaces)'"
    return "-x"


def _fish_arg(value: Value) -> str:
    if value.kind == "files":
        return "-F"
    if value.kind == "words":
        return "-a " + _fish_quote(" ".join(value.words))
    if value.kind == "refs":
        return "-a '(__fish_pinctl_refs)'"
    if value.kind == "pinned-refs":
        return "-a '(__fish_pinctl_pinned_refs)'"
    if value.kind == "namespaces":
        return "-a '(__fish_pinctl_namespaces)'"
    return ""


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_arms(root: Node) -> str:
    lines = []
    for passed in _passed_options(root):
        only = "test $kind = refs; and " if passed.refs_only else ""
        lines += [
            f"            case {' '.join(passed.names)}",
            f'                {only}set -a pass "{passed.long}=$next"',
            "                set i (math $i + 1)",
            f"            case {_fish_quote(passed.long + '=*')}",
            f"                {only}set -a pass $word",
        ]
        for short in passed.shorts:
            lines += [
                f"            case {_fish_quote(short + '?*')}",
                f'                {only}set -a pass "{passed.long}="(string sub -s 3 -- $word)',
            ]
    return "\n".join(lines)


_RENDERERS: dict[str, Callable[[Node], str]] = {"bash": _bash, "zsh": _zsh, "fish": _fish}

"""The zsh completion script: a function per command for _arguments, then shell/_pinctl.zsh.

Each command's function lists its options and arguments as _arguments specs and hands on to
its subcommands; the data file holds the functions that ask pinctl for image references and
namespaces, with the typed options passed on spliced into _pinctl_ask.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

from pinctl.completion import template
from pinctl.completion.calls import (DELETED_REFS_CALL, NAMESPACES_CALL, PINNED_REFS_CALL, REFS_CALL, Passed,
                                    call_words)
from pinctl.completion.template import sq
from pinctl.completion.tree import CommandNode, Opt, Value, is_short

_ACTIONS = {
    "files": "_files",
    "refs": "_pinctl_refs",
    "pinned-refs": "_pinctl_pinned_refs",
    "deleted-refs": "_pinctl_deleted_refs",
    "namespaces": "_pinctl_namespaces",
    "none": " ",  # a value with nothing to offer: zsh shows its description only
}


def render(root: CommandNode, passed: Sequence[Passed]) -> str:
    header = [
        "#compdef pinctl",
        "# zsh completion for pinctl. " + template.generated_by(),
        "# Install as _pinctl in a directory of $fpath ($(PREFIX)/share/zsh/site-functions), or:",
        "# source <(pinctl completion zsh) after compinit. Completing commands, options and choices",
        "# runs no program; image references and namespaces are asked of pinctl.",
        "",
    ]
    functions = [_command(node) for node in root.walk()]
    words = {
        "REFS": call_words(REFS_CALL),
        "PINNED_REFS": call_words(PINNED_REFS_CALL),
        "DELETED_REFS": call_words(DELETED_REFS_CALL),
        "NAMESPACES": call_words(NAMESPACES_CALL),
        "ROOT_COMMAND": _function_name("_pinctl_cmd", root),
    }
    tail = template.fill(template.read("_pinctl.zsh"), {"ARMS": _passed_arms(passed)}, words)
    return "\n".join(header) + "\n".join(functions) + "\n" + tail


def _function_name(prefix: str, node: CommandNode) -> str:
    """prefix, then _part for each command below the program: _pinctl_cmd_config_show."""
    return prefix + "".join("_" + re.sub(r"[^A-Za-z0-9]", "_", part) for part in node.path[1:])


def _command(node: CommandNode) -> str:
    specs = [_option(opt) for opt in node.opts]
    specs += _args(node)
    name = _function_name("_pinctl_cmd", node)
    lines = [f"{name}() {{"]
    if node.children:
        lines += ["  local curcontext=$curcontext state state_descr line ret=1", "  local -A opt_args"]
        specs += [f"'1:command:{_function_name('_pinctl_subcommands', node)}'", "'*:: :->command'"]
    # -A: a group's own options end at its subcommand, so `pin -a SOCKET REF` reaches pin's spec.
    lines.append("  _arguments -s -S" + (" -C -A '-*'" if node.children else "") + " \\")
    lines += [f"    {spec} \\" for spec in specs[:-1]] + [f"    {specs[-1]}" + (" && ret=0" if node.children else "")]
    if node.children:
        lines += _dispatch(node)
    lines.append("}")
    if node.children:
        lines += ["", *_subcommands(node)]
    return "\n".join(lines) + "\n\n"


def _dispatch(node: CommandNode) -> list[str]:
    lines = [
        "  case $state in",
        "  (command)",
        f"    curcontext=${{curcontext%:*:*}}:{'-'.join(node.path)}-$words[1]:",
        "    case $words[1] in",
    ]
    lines += [f"    ({child.path[-1]}) {_function_name('_pinctl_cmd', child)} && ret=0 ;;" for child in node.children]
    lines += ["    esac", "    ;;", "  esac", "  return ret"]
    return lines


def _subcommands(node: CommandNode) -> list[str]:
    items = [sq(f"{child.path[-1]}:{child.help}") for child in node.children]
    return [
        f"{_function_name('_pinctl_subcommands', node)}() {{",
        "  local -a commands=(",
        *[f"    {item}" for item in items],
        "  )",
        f"  _describe -t commands {sq(node.key + ' command')} commands",
        "}",
    ]


def _option(opt: Opt) -> str:
    if opt.final:
        exclusions = "(- *)"
    elif opt.repeat:
        exclusions = "*"
    else:
        exclusions = "(" + " ".join(opt.names) + ")"
    description = "[" + _bracket(opt.help) + "]"
    action = _value(opt.value, ":" if opt.value.optional else "") if opt.value else ""
    names = [name + _suffix(name, opt.value) for name in opt.names]
    if len(names) == 1:
        return sq(exclusions + names[0] + description + action)
    # Brace expansion gives each name the same spec: '(-o --output)'{-o+,--output=}'[...]...'
    return sq(exclusions) + "{" + ",".join(names) + "}" + sq(description + action)


def _suffix(name: str, value: Optional[Value]) -> str:
    # -n+: value in the same word or the next; --name=: after '=' or in the next word.
    if value is None:
        return ""
    return "+" if is_short(name) else "="


def _args(node: CommandNode) -> list[str]:
    specs = []
    for index, arg in enumerate(node.args, 1):
        position = "*" if arg.many else str(index)
        specs.append(sq(position) + sq(_value(arg.value, "")))
    return specs


def _value(value: Value, optional: str) -> str:
    message = value.label.replace("\\", "\\\\").replace(":", "\\:")
    action = "(" + " ".join(value.words) + ")" if value.kind == "words" else _ACTIONS[value.kind]
    return f":{optional}{message}:{action}"


def _bracket(text: str) -> str:
    return text.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


def _passed_arms(passed: Sequence[Passed]) -> list[str]:
    """case arms of _pinctl_ask: NAME VALUE, --long=VALUE and -xVALUE, each as --long=VALUE."""
    lines = []
    for option in passed:
        only = "[[ $kind == refs ]] && " if option.refs_only else ""
        lines += [
            f"({'|'.join(option.names)})",
            f'  {only}pass+=("{option.long}=${{(Q)_pinctl_words[i+1]}}"); (( i++ )) ;;',
            f"({option.long}=*)",
            f'  {only}pass+=("{option.long}=${{(Q)${{word#*=}}}}") ;;',
        ]
        for short in option.shorts:
            lines += [f"({short}?*)", f'  {only}pass+=("{option.long}=${{(Q)word[3,-1]}}") ;;']
    return lines

"""The fish completion script: shell/pinctl.fish, then a `complete` line per option and argument.

fish needs no dispatch code: each line carries the condition (the subcommands seen so far)
under which it applies. The data file holds the functions that ask pinctl for image
references and namespaces, with the typed options passed on spliced into __fish_pinctl_ask.
"""

from __future__ import annotations

from typing import Sequence

from pinctl.completion import template
from pinctl.completion.calls import (DELETED_REFS_CALL, NAMESPACES_CALL, PINNED_REFS_CALL, REFS_CALL, Passed,
                                    call_words)
from pinctl.completion.tree import CommandNode, Opt, Value, is_short

# What a value or an argument of each kind completes to, beyond fixed words and files.
_ASKED = {
    "refs": "(__fish_pinctl_refs)",
    "pinned-refs": "(__fish_pinctl_pinned_refs)",
    "deleted-refs": "(__fish_pinctl_deleted_refs)",
    "namespaces": "(__fish_pinctl_namespaces)",
}


def render(root: CommandNode, passed: Sequence[Passed]) -> str:
    header = [
        "# fish completion for pinctl. " + template.generated_by(),
        "# Install: $(PREFIX)/share/fish/vendor_completions.d/pinctl.fish, or: pinctl completion fish | source",
        "# Completing commands, options and choices runs no program; image references and",
        "# namespaces are asked of pinctl.",
    ]
    words = {
        "REFS": call_words(REFS_CALL),
        "PINNED_REFS": call_words(PINNED_REFS_CALL),
        "DELETED_REFS": call_words(DELETED_REFS_CALL),
        "NAMESPACES": call_words(NAMESPACES_CALL),
    }
    static = template.fill(template.read("pinctl.fish"), {"ARMS": _passed_arms(passed)}, words)
    lines = [line for node in root.walk() for line in ("", f"# {node.key}", *_node(node))]
    return "\n".join(header) + "\n\n" + static + "\n".join(lines) + "\n"


def _node(node: CommandNode) -> list[str]:
    condition = _condition(node)
    lines = [_line(condition, f"-a {child.path[-1]}", child.help) for child in node.children]
    lines += [_line(condition, _option(opt), opt.help) for opt in node.opts]
    lines += [_line(condition, _arg(arg.value), "") for arg in node.args]
    return lines


def _condition(node: CommandNode) -> str:
    seen = [f"__fish_seen_subcommand_from {name}" for name in node.path[1:]]
    if node.children:
        seen.append("not __fish_seen_subcommand_from " + " ".join(c.path[-1] for c in node.children))
    return "; and ".join(seen)


def _line(condition: str, what: str, description: str) -> str:
    parts = ["complete -c pinctl"]
    if condition:
        parts.append("-n " + _quote(condition))
    parts.append(what)
    if description:
        parts.append("-d " + _quote(description))
    return " ".join(parts)


def _option(opt: Opt) -> str:
    parts = []
    for name in opt.names:
        if name.startswith("--"):
            parts.append(f"-l {name[2:]}")
        elif is_short(name):
            parts.append(f"-s {name[1:]}")
        else:
            parts.append(f"-o {name[1:]}")
    if opt.value:
        parts.append(_option_value(opt.value))
    return " ".join(parts)


def _option_value(value: Value) -> str:
    # -r: the option needs a value; -x: ... and that value is no file name; -F: it is one.
    if value.kind == "files":
        return "-r -F"
    if value.kind == "words":
        return "-x -a " + _quote(" ".join(value.words))
    if value.kind == "namespaces":
        return "-x -a " + _quote(_ASKED["namespaces"])
    return "-x"


def _arg(value: Value) -> str:
    if value.kind == "files":
        return "-F"
    if value.kind == "words":
        return "-a " + _quote(" ".join(value.words))
    if value.kind in _ASKED:
        return "-a " + _quote(_ASKED[value.kind])
    return ""


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _passed_arms(passed: Sequence[Passed]) -> list[str]:
    """switch arms of __fish_pinctl_ask: NAME VALUE, --long=VALUE and -xVALUE, each as --long=VALUE."""
    lines = []
    for option in passed:
        only = "test $kind = refs; and " if option.refs_only else ""
        lines += [
            f"case {' '.join(option.names)}",
            f'    {only}set -a pass "{option.long}=$next"',
            "    set i (math $i + 1)",
            f"case {_quote(option.long + '=*')}",
            f"    {only}set -a pass $word",
        ]
        for short in option.shorts:
            lines += [f"case {_quote(short + '?*')}", f'    {only}set -a pass "{option.long}="(string sub -s 3 -- $word)']
    return lines

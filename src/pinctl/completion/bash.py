"""The bash completion script: shell/pinctl.bash with the command tree's tables spliced in.

The generated parts are three case statements: each command's subcommands and options
(_pinctl_node), the typed options passed on to pinctl (_pinctl_keep), and what each option
value and argument completes to (_pinctl_value). The rest is static bash in the data file.
"""

from __future__ import annotations

from typing import Sequence

from pinctl.completion import template
from pinctl.completion.calls import (DELETED_REFS_CALL, NAMESPACES_CALL, PINNED_REFS_CALL, REFS_CALL, Passed,
                                    call_words)
from pinctl.completion.template import sq
from pinctl.completion.tree import CommandNode, Value


def render(root: CommandNode, passed: Sequence[Passed]) -> str:
    header = [
        "# bash completion for pinctl                                 -*- shell-script -*-",
        "# " + template.generated_by(),
        "# Install: $(PREFIX)/share/bash-completion/completions/pinctl, or: source <(pinctl completion bash)",
        "# Works with and without the bash-completion package. Completing commands, options and",
        "# choices runs no program; image references and namespaces are asked of pinctl.",
    ]
    blocks = {"NODES": _node_arms(root), "KEEP": _keep_arms(passed), "VALUES": _value_arms(root)}
    return "\n".join(header) + "\n\n" + template.fill(template.read("pinctl.bash"), blocks, {})


def _node_arms(root: CommandNode) -> list[str]:
    """Per command: subcommands, options taking a value, those that may go without, all options."""
    lines = []
    for node in root.walk():
        valued = [n for o in node.opts if o.value for n in o.names]
        optval = [n for o in node.opts if o.value and o.value.optional for n in o.names]
        lines += [
            f"{sq(node.key)})",
            f"    subs={sq(' '.join(c.path[-1] for c in node.children))}",
            f"    valued={sq(' ' + ' '.join(valued) + ' ')}",
            f"    optval={sq(' ' + ' '.join(optval) + ' ')}",
            f"    opts={sq(' '.join(n for o in node.opts for n in o.names))}",
            "    ;;",
        ]
    return lines


def _keep_arms(passed: Sequence[Passed]) -> list[str]:
    # Namespaces go to a list of their own: only the calls for image references take them.
    return [f'{"|".join(p.names)}) {"nspass" if p.refs_only else "pass"}+=("{p.long}=$value") ;;' for p in passed]


def _value_arms(root: CommandNode) -> list[str]:
    """One arm per action, its patterns joined, in the order each action first appears."""
    patterns_of: dict[str, list[str]] = {}
    for pattern, action in _value_cases(root):
        patterns_of.setdefault(action, []).append(pattern)
    return [line for action, patterns in patterns_of.items() for line in (f"{'|'.join(patterns)})", f"    {action} ;;")]


def _value_cases(root: CommandNode) -> list[tuple[str, str]]:
    """(case pattern, action) for every option value and argument, in tree order."""
    actions_of = _option_actions(root)
    cases: list[tuple[str, str]] = []
    done: set[str] = set()
    for node in root.walk():
        for name, action in _option_values(node):
            if len(actions_of[name]) > 1:  # e.g. -o: other choices in other commands
                cases.append((sq(f"{node.key}|{name}"), action))
            elif name not in done:  # the same everywhere: one pattern for every command
                cases.append(("*" + sq("|" + name), action))
                done.add(name)
        cases += _arg_cases(node)
    return cases


def _option_values(node: CommandNode) -> list[tuple[str, str]]:
    """(option name, action) for each option of node that takes a value."""
    return [(name, _action(opt.value)) for opt in node.opts if opt.value is not None for name in opt.names]


def _option_actions(root: CommandNode) -> dict[str, set[str]]:
    """Every action each option name has anywhere in the tree."""
    found: dict[str, set[str]] = {}
    for node in root.walk():
        for name, action in _option_values(node):
            found.setdefault(name, set()).add(action)
    return found


def _arg_cases(node: CommandNode) -> list[tuple[str, str]]:
    cases = []
    for index, arg in enumerate(node.args):
        key = sq(f"{node.key}|#") + ("*" if arg.many else str(index))
        cases.append((key, _action(arg.value)))
    return cases


def _action(value: Value) -> str:
    if value.kind == "words":
        return '_pinctl_add "$2" ' + " ".join(value.words)
    if value.kind == "files":
        return "_pinctl_files"
    if value.kind == "refs":
        return '_pinctl_ask "$2" ' + call_words(REFS_CALL) + ' "${nspass[@]}"'
    if value.kind == "pinned-refs":
        return '_pinctl_ask "$2" ' + call_words(PINNED_REFS_CALL) + ' "${nspass[@]}"'
    if value.kind == "deleted-refs":
        return '_pinctl_ask "$2" ' + call_words(DELETED_REFS_CALL) + ' "${nspass[@]}"'
    if value.kind == "namespaces":
        return '_pinctl_ask "$2" ' + call_words(NAMESPACES_CALL)
    return ":"

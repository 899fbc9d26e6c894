"""What completion asks pinctl at run time, and which options typed on the line it passes on.

Commands, options and choices are written into the scripts; only image references and
namespaces live in the engine, so only those start pinctl. Each shell renders the same
``passed_on`` list into its own syntax: the decision is made here, once.
"""

from __future__ import annotations

from dataclasses import dataclass

from pinctl.completion.tree import NAMESPACE_OPTION, CommandNode, is_short

REFS_CALL = ("ls", "-q")
PINNED_REFS_CALL = ("ls", "-q", "--pinned")
# history's REF is mostly an image that is gone: the journal's names, not the node's.
DELETED_REFS_CALL = ("history", "-q", "--all")
NAMESPACES_CALL = ("namespaces", "-q")
# Options that choose the engine or config a call reads: typed ones are passed on, so that
# completing `pinctl -a /other.sock pin <TAB>` lists the images of the engine being talked to.
PASS_THROUGH = ("--address", "--timeout", "--config", "--docker-host", "--history-dir")


@dataclass(frozen=True)
class Passed:
    """An option typed on the line that the calls to pinctl repeat, always as LONG=VALUE.

    Always the long name: pinctl reads "-a=/x" as the socket "=/x".
    """

    long: str
    names: tuple[str, ...]

    @property
    def shorts(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if is_short(n))

    @property
    def refs_only(self) -> bool:
        """The namespaces narrow image references; namespaces themselves are listed from all."""
        return self.long == NAMESPACE_OPTION


def passed_on(root: CommandNode) -> tuple[Passed, ...]:
    """The root's options that choose the engine or config, then --namespace."""
    found = []
    for opt in root.opts:
        longs = [n for n in opt.names if n.startswith("--")]
        if longs and (longs[0] in PASS_THROUGH or longs[0] == NAMESPACE_OPTION):
            found.append(Passed(longs[0], opt.names))
    return tuple(sorted(found, key=lambda passed: (passed.refs_only, passed.long)))


def call_words(call: tuple[str, ...]) -> str:
    """The call as the scripts write it after the program name: `ls -q --pinned`."""
    return " ".join(call)

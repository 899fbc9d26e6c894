"""The shell data files (pinctl.completion/shell/) and how generated text is spliced into them.

The static part of each script lives in a file of its own shell's syntax, so that an editor
highlights it and shellcheck lints the bash one (tests/unit/test_completion.py). Two kinds of
placeholder mark where the renderers put generated text:

- a line holding only ``# @NAME@`` (indent allowed) takes a block of lines, each indented like
  the placeholder; being a comment, it leaves the file valid shell on its own;
- ``@NAME@`` inside a line takes one word, e.g. the pinctl call a function makes.

A placeholder without a value, or a value without a placeholder, is an error: a renamed
placeholder must not leave a script silently missing a part.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Mapping, Sequence, TypeVar

from pinctl import __version__

# One pass over the template, so that generated text is never itself searched for placeholders.
_PLACEHOLDER = re.compile(r"^(?P<indent>[ \t]*)# @(?P<block>[A-Z_]+)@\n|@(?P<word>[A-Z_]+)@", re.MULTILINE)
T = TypeVar("T")


def generated_by() -> str:
    """The line every script carries near its top, saying where it comes from."""
    return f"Generated from pinctl {__version__}'s command tree by tools/generate.py; do not edit."


def read(name: str) -> str:
    """A data file of pinctl.completion/shell/, from the wheel or the source tree alike."""
    return resources.files("pinctl.completion").joinpath("shell", name).read_text(encoding="utf-8")


def fill(template: str, blocks: Mapping[str, Sequence[str]], words: Mapping[str, str]) -> str:
    """template with every placeholder replaced; see the module docstring."""
    used: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        if match["block"]:
            indent = match["indent"]
            lines = _take(blocks, match["block"], used)
            return "".join(f"{indent}{line}\n" if line else "\n" for line in lines)
        return _take(words, match["word"], used)

    filled = _PLACEHOLDER.sub(replace, template)
    unused = (set(blocks) | set(words)) - used
    if unused:
        raise ValueError(f"the completion template has no placeholder for {', '.join(sorted(unused))}")
    return filled


def _take(values: Mapping[str, T], name: str, used: set[str]) -> T:
    if name not in values:
        raise ValueError(f"nothing to fill the completion template's placeholder @{name}@ with")
    used.add(name)
    return values[name]


def sq(text: str) -> str:
    """text in POSIX single quotes (bash, zsh)."""
    return "'" + text.replace("'", "'\\''") + "'"

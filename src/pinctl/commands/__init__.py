"""One function per command: a request in, a result out. pinctl.cli parses options, calls one of
these, prints the result and exits with the code the result carries. Guards (an empty policy
before a prune), polling (check --wait) and filters live here, not in click.

One module a noun, named as pinctl.cli names its own: ls (ls, namespaces), pin (pin, unpin, and
the ChangeReport sync's report is too), sync (once, --pull, with import_dirs, --watch), check,
gc (gc plan, prune), pull, importing (import), config (lint, export), history, fleet (fleet
status), criproxy (cri-proxy). This package holds only what several of them share.

Each function imports the capability it calls when it runs: one command loads what it uses, not
every capability (that would add some 60 ms to `pinctl ls`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from pinctl.backends.cri import CriRuntime, RuntimeVersion

# How a command that may not need the CRI opens it: only when it does, after the node's records
# have been asked for (pinctl.node.sources.open_runtime, bound to the config, in the cli).
OpenRuntime = Callable[[], "tuple[CriRuntime, RuntimeVersion]"]

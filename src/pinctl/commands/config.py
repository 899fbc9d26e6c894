"""pinctl config lint and pinctl config export: the policy checked, and written in a runtime's terms."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from pinctl.errors import EXIT_ERROR, EXIT_OK

if TYPE_CHECKING:
    from pinctl.config.loader import Config, PatternEntry
    from pinctl.node.sources import Node
    from pinctl.pins.export import Export
    from pinctl.pins.lint import ConfigPins, Problem
    from pinctl.pins.policy import Policy


def export(target: str, policy: Policy, node: Optional[Node], cfg: Config) -> Export:
    """The policy (and docker_pinned_image_labels) as a runtime's configuration, patterns it cannot
    express expanded to the names present now (none with node None: --offline). A crio drop-in
    carries CRI-O's own entries over; a containerd table fits the containerd at containerd_address."""
    from pinctl.node import crio as crio_node
    from pinctl.node.sources import containerd_target
    from pinctl.pins import export as exporting

    s = cfg.settings
    site, note = crio_node.site_entries(node.crio() if node else None, s.crio_config) if target == "crio" else ((), "")
    ctd = containerd_target(node, s.containerd_address, s.containerd_config) if target == "containerd" else None
    done = exporting.export(target, policy, None if node is None else node.id_names(), s.docker_pinned_image_labels,
                            site, ctd)
    return replace(done, notes=[note, *done.notes]) if note else done


@dataclass
class LintReport:
    problems: list[Problem]

    @property
    def exit_code(self) -> int:
        return EXIT_ERROR if self.problems else EXIT_OK


def lint(entries: Sequence[PatternEntry], open_node: Optional[Callable[[], Node]],
         ctd_pins: ConfigPins = lambda: ()) -> LintReport:
    """The patterns alone, against the node's images (given open_node), and containerd's entries."""
    from pinctl.pins import lint as linting

    return LintReport(linting.lint(entries, open_node, ctd_pins))

"""What pull works through: the CRI runtime (Kubernetes' images, namespace k8s.io) or Docker's
API (namespace moby), both from pinctl.landing, and the node's label views for pinning what was
pulled."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, Sequence

from pinctl.errors import EngineError, PinctlError, UsageError
from pinctl.landing.runtimes import CriTarget, DockerTarget, docker_destination
from pinctl.model import ALL_NAMESPACES, CRI_NAMESPACE, MANAGED_LABEL, PIN_LABEL
from pinctl.node import crio as crio_node
from pinctl.pins import plans as pinning

if TYPE_CHECKING:
    from pinctl.backends.cri import CriRuntime, RuntimeVersion
    from pinctl.model import ItemResult, LabelChange
    from pinctl.node.crio import CrioNode
    from pinctl.node.sources import Node
    from pinctl.pins.plans import NamespaceView
    from pinctl.pull.run import PullTarget


def choose_target(node: Node, namespaces: Sequence[str],
                  open_runtime: Callable[[], tuple[CriRuntime, RuntimeVersion]]) -> PullTarget:
    """Docker for -n moby or a node where only Docker answers; else the CRI runtime (k8s.io)."""
    engine = docker_destination(node, namespaces, "pulls")
    if engine is not None:
        return DockerTarget(engine)
    wanted = set(namespaces)
    if wanted and not wanted & {CRI_NAMESPACE, ALL_NAMESPACES}:
        raise UsageError(f"pull cannot pull into namespace {', '.join(sorted(wanted))}",
                         "pull goes through the CRI (-n k8s.io, the default) or Docker (-n moby)")
    return CriTarget(*open_runtime())


class NodeLabels:
    """Pins through pin's own plan (pinning.make_plan, apply_plan), on the namespace read afresh."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def _views(self, namespace: str) -> list[NamespaceView]:
        view = self.node.view_of(namespace)
        return [view] if view is not None else []

    def pin(self, namespace: str, ref: str) -> tuple[str, Optional[str]]:
        crio = self.node.crio()
        if crio is not None:
            return self._crio_pin(crio, ref)
        try:
            plan = pinning.make_plan(self._views(namespace), "pin", [ref], refusal=self.node.refusal)
            results = pinning.apply_plan(plan, dry_run=False)
        except EngineError as err:
            return "failed", str(err)
        return _first_outcome(results, f"no record {ref} in {namespace} after the pull")

    @staticmethod
    def _crio_pin(crio: CrioNode, ref: str) -> tuple[str, Optional[str]]:
        """On CRI-O a pin is an item of pinctl's drop-in, which a re-pull cannot drop."""
        try:
            results = crio_node.change(crio, None, "pin", [ref], "pinctl", dry_run=False).results
        except PinctlError as err:
            return "failed", str(err)
        return _first_outcome(results, f"CRI-O has no image {ref} after the pull")

    def pin_labels(self, namespace: str, ref: str) -> LabelChange:
        for view in self._views(namespace):
            record = view.by_name.get(ref)
            if record is not None:
                return {key: record.labels[key] for key in (PIN_LABEL, MANAGED_LABEL) if key in record.labels}
        return {}

    def restore(self, namespace: str, ref: str, labels: LabelChange) -> None:
        for view in self._views(namespace):
            record = view.by_name.get(ref)
            missing = {k: v for k, v in labels.items() if record is not None and record.labels.get(k) != v}
            if record is not None and missing:
                view.store.set_labels(namespace, [(record, missing)])


def _first_outcome(results: Sequence[ItemResult], missing: str) -> tuple[str, Optional[str]]:
    """The pin of one pulled reference: its first failure, ``missing`` when nothing was pinned, else its action."""
    failed = [r for r in results if not r.done]
    if failed or not results:
        return "failed", (failed[0].error if failed else missing)
    return results[0].action, None

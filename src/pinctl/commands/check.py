"""pinctl check: pinctl's view of the pins against what the CRI runtime tells the kubelet."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from pinctl.errors import EXIT_ERROR, EXIT_OK
from pinctl.model import RUNTIME_CONTAINERD, ImageRow

if TYPE_CHECKING:
    from pinctl.backends.cri import RuntimeVersion
    from pinctl.check.compare import CheckResult, Clock, RuntimeImages
    from pinctl.node.sources import Node
    from pinctl.pins.policy import Policy


@dataclass
class CheckReport:
    result: CheckResult
    waited: Optional[float]
    # pinctl's side of the last comparison, and the namespaces it was read from.
    rows: list[ImageRow] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.result.agree else EXIT_ERROR


@dataclass(frozen=True)
class CheckRequest:
    """pinctl check: the images to ask about one by one (none: every image listed), how long to
    poll for agreement, and whether sizes count (a textfile's image bytes: the runtime's figures)."""

    refs: Sequence[str] = ()
    wait: float = 0.0
    sizes: bool = False
    history_dir: str = ""  # the deletion journal, for a REF the runtime does not know ("": not read)
    # The kubelet's config file (None: its default file when there) and root dir (its records).
    kubelet_config: Optional[str] = None
    kubelet_root_dir: str = "/var/lib/kubelet"


def check(node: Node, policy: Policy, open_runtime: Callable[[], tuple[RuntimeImages, RuntimeVersion]],
          request: CheckRequest, progress: Callable[[CheckResult, float], None], clock: Optional[Clock] = None
          ) -> CheckReport:
    """pinctl's view against the runtime's, asked again until they agree or wait runs out."""
    node.prefetch()  # the node's records come while the CRI is opened and check's modules load
    runtime, version = open_runtime()
    from pinctl.backends import cri_dockerd
    from pinctl.check import compare as checking

    rows: list[ImageRow] = []
    # The CRI through cri-dockerd names Docker, not cri-dockerd's release: its process says that.
    frontend = cri_dockerd.find(runtime.endpoint) if version.name == checking.DOCKER else None

    polls = 0

    def read() -> CheckResult:
        nonlocal polls
        if polls:  # the first poll's records were asked for above
            node.prefetch()
        polls += 1
        listed = None
        if not request.refs:  # the CRI's whole list, asked before the node's records are read
            runtime.prefetch("images")
            if version.name == RUNTIME_CONTAINERD:
                # containerd's CRI answers from memory, before containerd has encoded the records:
                # taken now, the list is decoded while pinctl would only wait. (Through cri-dockerd
                # it is Docker's own list, as slow as the rows' listing it overlaps: taken after.)
                listed = runtime.list_images()
        rows[:] = node.rows(policy, runtime_sizes=request.sizes).rows
        site = crio.check_site(rows) if (crio := node.crio()) is not None else None
        return checking.check_runtime(rows, runtime, version, request.refs, frontend, site, node.config_pins(),
                                      listed)

    from pinctl.check import pull_records

    kubelet = pull_records.kubelet_side(request.kubelet_config, request.kubelet_root_dir)
    wait = request.wait
    result, waited = checking.wait_for_agreement(read, wait, clock or checking.SystemClock(), progress)
    _unknown_wanted(result, policy)
    if request.history_dir and request.refs:
        _unknown_from_journal(result, request.history_dir)
    if kubelet is not None:  # what it does with the pinned images, once their pins are settled
        checking.judge_kubelet(result, kubelet.policy, kubelet.config, kubelet.problems, kubelet.read)
    return CheckReport(result, waited if wait > 0 else None, rows, node.selected_namespaces())


def _unknown_wanted(result: CheckResult, policy: Policy) -> None:
    """A REF the runtime knows no image by is still wanted when a pattern names it: WANTED says
    so, as ls --drift would once it arrives."""
    from pinctl.check.compare import MISMATCH_UNKNOWN_IMAGE
    from pinctl.pins import plans as pinning

    unknown = [item for item in result.items if item.mismatch == MISMATCH_UNKNOWN_IMAGE]
    if unknown:
        wanted = pinning.wanted_names(policy, [item.refs[0] for item in unknown])
        for item in unknown:
            item.desired = item.refs[0] in wanted


def _unknown_from_journal(result: CheckResult, directory: str) -> None:
    """A REF the runtime knows no image by: if the deletion journal has it, its cause says who
    deleted it, and its fix where to read why."""
    from pinctl.check.compare import MISMATCH_UNKNOWN_IMAGE
    from pinctl.commands.history import latest_deletions, went

    unknown = [item for item in result.items if item.mismatch == MISMATCH_UNKNOWN_IMAGE]
    if not unknown:
        return
    found = latest_deletions(directory, [item.refs[0] for item in unknown])
    for item in unknown:
        deletion = found.get(item.refs[0])
        if deletion is not None:
            name = item.refs[0]
            item.cause = f"the runtime knows no image by this name: it was {went(deletion)}"
            item.fix = f"pinctl history {name} says who and why; pinctl pull {name} (or import) brings it back"

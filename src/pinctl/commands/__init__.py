"""One function per command: a request in, a result out. pinctl.cli parses options, calls one of
these, prints the result and exits with the code the result carries. Guards (an empty policy
before a prune), polling (check --wait) and filters live here, not in click. The long-running
commands (sync --watch, cri-proxy) are in commands.services, and fleet status, which asks the
Kubernetes API, in commands.fleet; history, which reads the deletion journal, in commands.history.

Each function imports the capability it calls when it runs: one command loads what it uses, not
every capability (that would add some 60 ms to `pinctl ls`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from pinctl.errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_PARTIAL, PinctlError, UsageError
from pinctl.model import (ACTION_ALREADY_UNPINNED, ACTION_UNPINNED, REASON_DOCKER_LABEL, REASON_PATTERN, STATUS_PARTIAL,
                          STATUS_SUCCESS, ImageRow, ItemResult, Reason, Status)

if TYPE_CHECKING:
    from pinctl.backends.cri import CriRuntime, RuntimeVersion
    from pinctl.check.compare import CheckResult, Clock, RuntimeImages
    from pinctl.config.loader import Config, PatternEntry
    from pinctl.gc.kubelet import SourcedGcSettings
    from pinctl.gc.model import GcSettings
    from pinctl.gc.plan import GcReport, PruneItem, PrunePlan, PruneReport, PruneRequest
    from pinctl.imports.run import ImportItem, ImportReport, ImportRequest
    from pinctl.node.sources import Node
    from pinctl.pins.export import Export
    from pinctl.pins.lint import ConfigPins, Problem
    from pinctl.pins.policy import Policy
    from pinctl.pull.run import PullItem, PullReport, PullRequest

OpenRuntime = Callable[[], "tuple[CriRuntime, RuntimeVersion]"]


@dataclass(frozen=True)
class LsQuery:
    """What `pinctl ls` asks for: filter terms and switches."""

    filters: Sequence[str] = ()
    pinned: Optional[bool] = None
    drift: bool = False
    dialect: str = "pinctl"
    # The deletion journal's directory ("": none is read), and whether the policy's exact names
    # missing from the node are looked up in it too (filter terms that match nothing always are).
    history_dir: str = ""
    point_absent: bool = False

    @property
    def names_only_will_do(self) -> bool:
        return not (self.filters or self.drift or self.pinned is not None)


@dataclass
class LsResult:
    rows: list[ImageRow]
    errors: list[dict[str, str]] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)  # filter terms that match no image
    # An unmatched term the deletion journal names -> how it went, and where to read more.
    went: dict[str, str] = field(default_factory=dict)
    # The policy's exact names missing from the node that the journal says were deleted, one line each.
    deleted_wanted: list[str] = field(default_factory=list)


def ls(node: Node, policy: Policy, query: LsQuery, runtime: Optional[RuntimeImages] = None) -> LsResult:
    """Rows with pins and reasons, filtered; with a runtime, what it tells the kubelet too."""
    node.prefetch()  # the records come while the modules load and the CRI's sizes are asked for
    from pinctl.check.compare import annotate_cri
    from pinctl.pins.listing import filter_rows, unmatched_terms

    listing = node.rows(policy)
    if runtime is not None:
        annotate_cri(listing.rows, runtime.list_images())
    rows = filter_rows(listing.rows, query.filters, query.pinned, query.drift, query.dialect)
    lost = {term: said for term in query.filters for said in unmatched_terms(listing.rows, [term], query.dialect)}
    result = LsResult(rows, listing.errors, list(lost.values()))
    if query.history_dir:
        _point_at_journal(result, lost, listing.rows, policy, query)
    return result


# At most this many lines name wanted images the journal says were deleted; the rest are counted.
DELETED_WANTED_LINES = 5


def _point_at_journal(result: LsResult, lost: dict[str, str], rows: Sequence[ImageRow], policy: Policy,
                      query: LsQuery) -> None:
    """Where ls names an image that is not on the node, the journal's newest word on it. The
    journal is read only when there is such an image: a filter term that matched nothing, or
    (point_absent) an exact name of the policy no image has."""
    from pinctl.commands.history import absent_exact_patterns, latest_deletions, pointer
    from pinctl.pins.patterns import is_pattern

    terms = [term for term in lost if not is_pattern(term)]
    absent = absent_exact_patterns(policy.patterns, (reason.detail for row in rows for reason in row.reasons
                                                     if reason.kind == REASON_PATTERN)) if query.point_absent else []
    if not terms and not absent:
        return
    found = latest_deletions(query.history_dir, [*terms, *(pattern.text for pattern in absent)])
    result.went = {lost[term]: pointer(term, found[term]) for term in terms if term in found}
    lines = [f"{pattern.text}, wanted by the policy ({pattern.source or 'pattern'}), is not on the node: "
             f"{pointer(pattern.text, found[pattern.text])}" for pattern in absent if pattern.text in found]
    if len(lines) > DELETED_WANTED_LINES:
        more = len(lines) - DELETED_WANTED_LINES + 1
        lines[DELETED_WANTED_LINES - 1:] = [f"and {more} more wanted images deleted: pinctl history --wanted"]
    result.deleted_wanted = lines


def ls_names(node: Node) -> list[str]:
    """References alone, from the image lists: no manifest is read (what completion calls)."""
    return [ref for _namespace, ref in node.names()]


@dataclass
class ChangeReport:
    """pin, unpin or sync: every item, the exit code, and warnings said after the items."""

    command: str
    results: list[ItemResult]
    dry_run: bool
    warnings: list[str] = field(default_factory=list)

    @property
    def status(self) -> Status:
        from pinctl.pins.plans import status_of

        return status_of(self.results)

    @property
    def exit_code(self) -> int:
        codes = {STATUS_SUCCESS: EXIT_OK, STATUS_PARTIAL: EXIT_PARTIAL}  # 130: a SIGINT left items not tried
        return EXIT_INTERRUPTED if any(r.interrupted for r in self.results) else codes.get(self.status, EXIT_ERROR)


def change(node: Node, command: str, args: Sequence[str], dialect: str, dry_run: bool,
           policy: Optional[Policy] = None) -> ChangeReport:
    """pin or unpin: every argument parsed first (UsageError changes nothing), then applied.
    unpin with the policy also says what will keep or pin again an image it unpinned."""
    from pinctl.pins import plans as pinning

    crio = node.crio()
    if crio is not None:
        from pinctl.node import crio as crio_node

        done = crio_node.change(crio, policy, command, args, dialect, dry_run)
        return ChangeReport(command, done.results, dry_run, done.warnings)
    plan = pinning.make_plan(node.views(), command, args, dialect, node.refusal)
    report = ChangeReport(command, pinning.apply_plan(plan, dry_run), dry_run)
    if command == pinning.UNPIN and policy is not None and any(r.action in UNPINNED for r in report.results):
        report.warnings = unpin_warnings(node.rows(policy, runtime_sizes=False).rows, report.results)
    return report


UNPINNED = (ACTION_UNPINNED, ACTION_ALREADY_UNPINNED)


def unpin_warnings(rows: Sequence[ImageRow], results: Sequence[ItemResult]) -> list[str]:
    """What will keep, or pin again, an image that unpin left without the pin label.

    rows: the node's rows as ls has them with the policy (their reasons); results: unpin's items.
    One line per image and cause, naming the image by a tag: a policy pattern (the next sync
    labels it again), cri-dockerd's sandbox image (it keeps it by name), a Docker config label
    that cri-dockerd's --pinned-image-labels selects. What containerd does with a record it
    relabels or does not (its pinned_images; its sandbox image) is each item's own warning."""
    from pinctl.pins import sandbox as sandbox_rules

    unpinned = {(r.namespace, r.ref) for r in results if r.action in UNPINNED}
    images: dict[tuple[Optional[str], str], list[ImageRow]] = {}
    for row in rows:
        if (row.namespace, row.ref) in unpinned:
            images.setdefault((row.namespace, row.group_key), []).append(row)
    warnings: list[str] = []
    for group in images.values():
        name = min((row.ref for row in group), key=lambda ref: (ref.startswith("sha256:"), "@" in ref, ref))
        reasons = list(dict.fromkeys(group[0].reasons))
        lines = [_keeps_it(name, reason) for reason in reasons]
        lines.append(sandbox_rules.docker_unpin_warning(name, reasons, group[0].source))
        warnings += [line for line in lines if line and line not in warnings]
    return warnings


def _keeps_it(name: str, reason: Reason) -> Optional[str]:
    if reason.kind == REASON_PATTERN:
        return f"{name}: pattern {reason.detail} ({reason.source}) pins it again at the next sync"
    if reason.kind == REASON_DOCKER_LABEL:
        return f"{name}: cri-dockerd keeps it anyway: its config label matches {reason.detail}"
    return None


@dataclass(frozen=True)
class SyncRequest:
    """pinctl sync's switches; files: the config files read, named when an empty policy refuses --prune."""

    prune: bool = False
    dry_run: bool = False
    allow_empty_policy: bool = False
    files: Sequence[str] = ()


def sync(node: Node, policy: Policy, request: SyncRequest) -> ChangeReport:
    from pinctl.pins import plans as pinning

    refuse_empty_prune(policy, request)
    crio = node.crio()
    if crio is not None:
        from pinctl.node import crio as crio_node

        done = crio_node.sync(crio, policy, request.prune, request.dry_run)
        return ChangeReport("sync", done.results, request.dry_run, done.warnings)
    plan = pinning.make_sync_plan(node.views(), policy, request.prune)
    return ChangeReport("sync", pinning.apply_plan(plan, request.dry_run), request.dry_run)


def refuse_empty_prune(policy: Policy, request: SyncRequest) -> None:
    """A mistyped config path must not unpin a node: an empty policy prunes only when told to."""
    if request.prune and not policy and not request.allow_empty_policy:
        read = ", ".join(request.files) or "no config file"
        raise UsageError(f"the policy has no pinned_images (read: {read}); --prune would remove every pin sync added",
                         "fix the config, or pass --allow-empty-policy if that is what you want")


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

    def read() -> CheckResult:
        if not request.refs:  # the CRI's whole list, answered while the node's records are read
            runtime.prefetch("images")
        rows[:] = node.rows(policy, runtime_sizes=request.sizes).rows
        site = crio.check_site(rows) if (crio := node.crio()) is not None else None
        return checking.check_runtime(rows, runtime, version, request.refs, frontend, site, node.config_pins())

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


def namespaces(node: Node) -> list[tuple[str, bool]]:
    return node.namespaces()


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


def gc_plan(node: Node, policy: Policy, open_runtime: OpenRuntime, settings: SourcedGcSettings,
            usage: Optional[float]) -> GcReport:
    """The kubelet's next GC run as modelled from the runtime's images, containers and disk."""
    from datetime import datetime, timezone

    # The engines answer while pinctl works: the node's records while the CRI is opened and the
    # GC's modules load, the CRI's lists while the records are read; each is taken after.
    node.prefetch()
    runtime, version = open_runtime()
    from pinctl.gc import plan as gc

    runtime.prefetch("images", "containers")
    rows = node.rows(policy, runtime_sizes=False).rows
    domain, kubelet = gc.cri_domain(node, runtime, version), gc.kubelet_start_time(runtime.endpoint)
    return gc.gc_plan(domain, rows, settings, datetime.now(timezone.utc), usage, kubelet)


@dataclass(frozen=True)
class PruneJob:
    """pinctl prune: the kubelet's GC settings, how far to go, where (-n), and whether only to plan."""

    settings: GcSettings
    limits: PruneRequest
    namespaces: Sequence[str] = ()
    dry_run: bool = False


def prune(node: Node, policy: Policy, open_runtime: OpenRuntime, job: PruneJob,
          confirm: Callable[[Sequence[PrunePlan]], None],
          progress: Callable[[PruneItem], None] = lambda _item: None) -> PruneReport:
    """Plan per runtime, have the plan confirmed (unless a dry run), then delete item by item."""
    from datetime import datetime, timezone

    from pinctl.gc import plan as gc

    limits = job.limits
    if limits.until_usage is not None and (limits.all_unused or limits.images):
        raise UsageError(f"--until-usage and {'REF' if limits.images else '--all-unused'} do not go together", "pick one")
    rows = node.rows(policy, runtime_sizes=False).rows
    now = datetime.now(timezone.utc)
    plans = [gc.plan_prune(domain, rows, job.settings, limits, now)
             for domain in gc.prune_domains(node, job.namespaces, open_runtime)]
    unmatched = [term for term in limits.images if not any(term in plan.matched for plan in plans)]
    if unmatched:  # before anything is asked or deleted
        raise UsageError(f"no image matches {', '.join(unmatched)}: nothing was deleted", "pinctl ls lists the images")
    if not job.dry_run and any(plan.delete for plan in plans):
        confirm(plans)
    items = gc.apply_prune(plans, gc.wanted_now(node, policy), job.dry_run, progress)
    return gc.PruneReport(items, job.dry_run, plans)


@dataclass(frozen=True)
class PullCallbacks:
    """What pull says while it works: a line of progress for a reference, and each item done."""

    progress: Callable[[str, str], None]
    finished: Callable[[PullItem], None]


def pull(node: Node, open_runtime: OpenRuntime, request: PullRequest, callbacks: PullCallbacks) -> PullReport:
    """Every reference parsed first (a malformed one pulls nothing), then pulled through the
    runtime that will use it, within the disk budget, each pinned right after its pull."""
    from pinctl import refs as references
    from pinctl.pins.patterns import is_pattern

    wanted: list[str] = []
    for arg in request.refs:
        if is_pattern(arg) or arg.startswith("sha256:"):
            raise UsageError(f"cannot pull {arg}: only a reference names what to pull",
                             "give registry.example/team/app:1.0 or NAME@sha256:<digest>")
        wanted.append(references.normalize(arg))
    return _pull_refs(node, open_runtime, request, list(dict.fromkeys(wanted)), callbacks)


def _pull_refs(node: Node, open_runtime: OpenRuntime, request: PullRequest, wanted: Sequence[str],
               callbacks: PullCallbacks) -> PullReport:

    from pinctl.backends import registry
    from pinctl.backends.registry_auth import load_auths
    from pinctl.pull import run as pulling
    from pinctl.pull.targets import NodeLabels, choose_target

    auths = load_auths(request.registry_config) if request.registry_config else {}
    target = choose_target(node, request.namespaces, open_runtime)
    if not wanted:
        return pulling.PullReport(target.name, [], request.max_usage)
    run = pulling.PullRun(target, NodeLabels(node), request, pulling.Budget(target, request.max_usage), auths,
                          registry.compressed_size, callbacks.progress)
    items, interrupted = pulling.run(run, wanted, callbacks.finished)
    return pulling.PullReport(target.name, items, request.max_usage, interrupted)


@dataclass
class SyncPullReport:
    """sync --pull: the pulls (with what the policy names but cannot be pulled), then the sync."""

    pulled: PullReport
    sync: Optional[ChangeReport]

    @property
    def exit_code(self) -> int:
        if self.pulled.interrupted or self.sync is None:
            return self.pulled.exit_code
        codes = {self.pulled.exit_code, self.sync.exit_code}
        return EXIT_OK if codes == {EXIT_OK} else (EXIT_ERROR if codes == {EXIT_ERROR} else EXIT_PARTIAL)


def sync_pull(node: Node, reopen: Callable[[], Node], policy: Policy, open_runtime: OpenRuntime,
              request: PullRequest, sync_request: SyncRequest, callbacks: PullCallbacks) -> SyncPullReport:
    """Pull every exact reference of the policy the node lacks, then sync on the node as the pulls
    left it (reopen: a first pull may create the namespace). Globs, keywords and image IDs name
    no one image to pull: each is reported as skipped, with why."""
    from pinctl import refs as references
    from pinctl.pull import run as pulling


    refuse_empty_prune(policy, sync_request)
    exact = [p for p in policy.patterns if p.kind == "exact" and not p.needle.startswith("sha256:")]
    wanted = list(dict.fromkeys(references.normalize(p.text) for p in exact))
    report = _pull_refs(node, open_runtime, replace(request, refs=wanted, pin=False), wanted, callbacks)
    for pattern in policy.patterns:
        if pattern not in exact:
            what = "an image ID" if pattern.kind == "exact" else f"a {pattern.kind}"
            report.items.append(pulling.PullItem(pattern.text, "", pulling.SKIPPED, unpullable=True,
                                                 why=f"{what} names no one image to pull ({pattern.source or 'policy'})"))
    if report.interrupted:
        return SyncPullReport(report, None)
    return SyncPullReport(report, sync(reopen(), policy, replace(sync_request, dry_run=False)))


# -- import ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportCallbacks:
    """What import says while it works: a line of progress for an archive, and each item done."""

    progress: Callable[[str, str], None]
    finished: Callable[[ImportItem], None]


def import_(node: Node, open_runtime: OpenRuntime, cfg: Config, request: ImportRequest,
            callbacks: ImportCallbacks) -> ImportReport:
    """Every archive in turn, through the runtime that will use its images (containerd's own
    services for k8s.io, Docker's load for moby), within the disk budget; with request.pin each
    reference is pinned right after its own record is made."""
    from pinctl.imports import run as importing
    from pinctl.imports.targets import choose_import_target
    from pinctl.pull.targets import NodeLabels

    if not request.archives:
        raise UsageError("import needs an archive", "give ARCHIVE... (a docker save or OCI layout tar)")
    request.platform_filter()  # a malformed --platform imports nothing
    settings = cfg.settings
    target = choose_import_target(node, request.namespaces, settings.containerd_address, settings.timeout,
                                  request.timeout, request.snapshotter, settings.containerd_config, open_runtime)
    run = importing.ImportRun(target, NodeLabels(node), request, callbacks.progress, callbacks.finished)
    items, interrupted = importing.run(run, list(dict.fromkeys(request.archives)))
    return importing.ImportReport(target.name, items, request.max_usage, interrupted, run.notes)


@dataclass
class SyncImportReport:
    """sync with import_dirs: what the directories' archives gave (imports, and their pins and
    prunes), then the policy's sync."""

    imports: list[ImportItem]
    archive_results: list[ItemResult]
    sync: ChangeReport
    notes: list[str] = field(default_factory=list)

    @property
    def results(self) -> list[ItemResult]:
        return sorted([*self.archive_results, *self.sync.results], key=lambda r: (r.namespace, r.ref))

    @property
    def status(self) -> Status:
        from pinctl.pins.plans import status_of

        failed_import = any(item.action == "failed" for item in self.imports)
        status = status_of(self.results)
        if failed_import and status == STATUS_SUCCESS:
            return STATUS_PARTIAL if self.results or len(self.imports) > 1 else "error"
        return status

    @property
    def exit_code(self) -> int:
        return {STATUS_SUCCESS: EXIT_OK, STATUS_PARTIAL: EXIT_PARTIAL}.get(self.status, EXIT_ERROR)


def sync_with_imports(node: Node, reopen: Callable[[], Node], policy: Policy, open_runtime: OpenRuntime, cfg: Config,
                      sync_request: SyncRequest, request: ImportRequest,
                      callbacks: ImportCallbacks) -> SyncImportReport:
    """sync, with import_dirs: each directory's archives imported (once) and pinned as the
    archive's own; with --prune, the pins an archive no longer gives removed. Then the policy's
    sync on the node as the imports left it. An empty policy prunes only archive pins unless
    --allow-empty-policy (sync's own guard)."""
    from pinctl.imports import dirs as import_dirs
    from pinctl.imports import run as importing
    from pinctl.imports.targets import choose_import_target

    settings = cfg.settings
    notes: list[str] = []
    try:
        target = choose_import_target(node, settings.namespaces, settings.containerd_address, settings.timeout,
                                      request.timeout, request.snapshotter, settings.containerd_config, open_runtime)
    except PinctlError as err:
        imports = [importing.ImportItem(directory, "", "", "failed", str(err)) for directory in settings.import_dirs]
        dirs_report = import_dirs.DirsReport(imports=imports)
    else:
        dirs_report = import_dirs.sync_dirs(node, target, request, settings.import_dirs, sync_request.prune,
                                            sync_request.dry_run, callbacks.progress, callbacks.finished)
    policy_request = sync_request
    if sync_request.prune and not policy and not sync_request.allow_empty_policy:
        notes.append("the policy has no pinned_images: only pins of import_dirs archives were pruned "
                     "(--allow-empty-policy prunes sync's own too)")
        policy_request = replace(sync_request, prune=False)
    report = sync(reopen(), policy, policy_request)
    return SyncImportReport(dirs_report.imports, dirs_report.results, report, notes + dirs_report.notes)

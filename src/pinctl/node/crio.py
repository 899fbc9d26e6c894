"""A CRI-O node: images read through the CRI alone, pins kept in pinctl's own CRI-O drop-in.

CRI-O has no image labels and no namespaces, and no containerd socket is involved. Its pins are
the effective ``pinned_images`` of its files (``pinctl.config.crio``) plus its pause image; pinctl
owns one drop-in, sorting after the site's, that carries the site's effective list over and adds
its own items. Every write is one atomic file replacement, then a SIGHUP to the crio process
behind the socket, then the CRI asked again until it says what the files say (read back).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from pinctl import refs
from pinctl.backends.cri import CRIO_ENDPOINT, CriRuntime, socket_path
from pinctl.config import crio as crio_config
from pinctl.node import crio_apply, crio_lock, crio_process
from pinctl.node.crio_process import CrioProcess
from pinctl.node.protocol import Followed, Name
from pinctl.errors import AmbiguousRef, EngineError, PinctlError
from pinctl.model import (
    ACTION_ALREADY_PINNED,
    ACTION_ALREADY_UNPINNED,
    ACTION_CHANGED_UNDER_US,
    ACTION_FAILED,
    ACTION_PINNED,
    ACTION_PRUNED,
    ACTION_UNPINNED,
    REASON_CRIO_CONFIG,
    REASON_CRIO_PIN,
    REASON_PATTERN,
    REASON_SANDBOX,
    RUNTIME_CRIO,
    ImageRow,
    ItemResult,
)
from pinctl.pins import crio as crio_pins
from pinctl.pins.listing import Listing, annotate_policy, id_matches
from pinctl.pins.patterns import is_pattern, matches, parse_pattern
from pinctl.pins.policy import Policy

if TYPE_CHECKING:
    from pinctl.backends.cri import CriImage, RuntimeVersion
    from pinctl.config.crio import CrioConfig, CrioEntry
    from pinctl.config.loader import Config
    from pinctl.pins.plans import NamespaceView

# ItemResult.namespace on a CRI-O node, which has none (shown as -).
NO_NAMESPACE = ""


# -- the crio process -------------------------------------------------------------------------
# pinctl finds the process serving the CRI socket and confirms it is CRI-O (node.crio_process),
# and reads --config and --config-dir from its command line, so the files it shows are the ones
# CRI-O runs with.

# The reload to name when the crio process cannot be told (CrioSite.reload names its pid then).
RELOAD_ANY_CRIO = "systemctl reload crio (or: kill -HUP $(pidof crio))"


@dataclass
class CrioNode:
    """The CRI-O behind one CRI endpoint: the CRI, the crio process (or why it cannot be told),
    and where its files are. notice hears what a writer waits for (another pinctl's lock)."""

    runtime: CriRuntime
    version: RuntimeVersion
    process: Optional[CrioProcess]
    config_path: str
    config_dir: str
    explicit: bool = False
    not_found: Optional[crio_process.NotFound] = None
    notice: Callable[[str], None] = lambda _line: None

    def config(self) -> CrioConfig:
        return crio_config.read_crio_config(self.config_path, self.explicit, dropin_dir=self.config_dir)

    def images(self) -> list[CriImage]:
        return self.runtime.list_images()

    def writable(self) -> CrioProcess:
        """The crio process a write must reload, or EngineError saying why there is none: a drop-in
        CRI-O is not told of would be a pin reported and not kept, so nothing is written then."""
        if self.process is not None:
            return self.process
        why = self.not_found or crio_process.NotFound(f"no crio process serves {self.runtime.endpoint}",
                                                      "point -r at CRI-O's socket")
        raise EngineError(f"pinctl writes nothing: {why.reason}", why.fix)

    def describe(self) -> str:
        return f"CRI-O {self.version.version} at {self.runtime.endpoint}"

    def check_site(self, rows: Sequence[ImageRow] = ()) -> CrioSite:
        """What check needs of CRI-O's files beyond the rows: the reload that works, drop-ins that
        cancel pinctl's list (and the images whose pinctl item they cancel), and the reason CRI-O
        gave for refusing its last reload, where its log tells."""
        config = self.config()
        reload = (f"kill -HUP {self.process.pid} (or: systemctl reload crio)" if self.process
                  else RELOAD_ANY_CRIO)
        refusal = crio_process.last_refusal(self.process.log) if self.process else None
        return CrioSite(reload, config.dropin_path, tuple(config.overriding), cancelled_pins(rows, config),
                        refusal)


def cancelled_pins(rows: Sequence[ImageRow], config: CrioConfig) -> dict[str, str]:
    """Image ID -> pinctl's item that would pin it, for each image whose pin a later drop-in
    cancels (it sorts after pinctl's and sets pinned_images, replacing pinctl's list)."""
    if not config.overriding or not config.own_entries:
        return {}
    names: dict[str, list[str]] = {}
    for row in rows:
        names.setdefault(row.group_key, []).append(row.ref)
    found: dict[str, str] = {}
    for image_id, refs_of in names.items():
        item = next((e.text for e in config.own_entries if crio_pins.item_matches(e.text, refs_of)), None)
        if item is not None:
            found[image_id] = item
    return found


def watched_paths(crio: CrioNode) -> tuple[str, ...]:
    """CRI-O's files whose change can change its effective pinned_images: the main file, the
    drop-in directory (a file added or removed) and every file read (subdirectories too)."""
    try:
        files = crio.config().files
    except PinctlError:
        files = ()  # unreadable now: the directory's change shows when it is mended
    return tuple(dict.fromkeys((crio.config_path, crio.config_dir, *files,
                                *(os.path.dirname(path) for path in files))))


def site_entries(crio: Optional[CrioNode], path: Optional[str]) -> tuple[tuple[CrioEntry, ...], str]:
    """CRI-O's own effective entries, which a drop-in written last replaces and so must carry
    over: the CRI-O node's, else those of the files at path (or CRI-O's default); when they cannot
    be read, a note saying so instead (the export itself still helps)."""
    try:
        found = crio.config() if crio is not None else crio_config.read_crio_config(
            path or crio_config.CRIO_DEFAULT_PATH, explicit=path is not None)
    except PinctlError as err:
        return (), f"CRI-O's own pinned_images were not read ({err}); the drop-in replaces them: add them to it"
    # Entries pinctl itself put in its drop-in are the policy's, not the site's.
    return found.site_entries, ""


@dataclass(frozen=True)
class CrioSite:
    """A CRI-O's files as check needs them: how to make it re-read them, where pinctl's drop-in is,
    the drop-ins that sort after it and set pinned_images (so pinctl's items count for nothing),
    the images whose pinctl item they cancel (ID -> item), and CRI-O's reason for refusing its
    last reload (from its log)."""

    reload: str
    dropin: str
    overriding: tuple[str, ...] = ()
    cancelled: dict[str, str] = field(default_factory=dict)
    refusal: Optional[str] = None


def detect(cfg: Config, warn: Callable[[str], None]) -> Optional[CrioNode]:
    """The CRI-O node pinctl was pointed at (-r), or found where crictl looks when no containerd
    was named and none is at the default socket; None when the runtime is not CRI-O."""
    endpoint = cfg.settings.runtime_endpoint
    containerd = cfg.settings.containerd_address
    no_containerd = cfg.defaulted("containerd_address") and not os.path.exists(containerd)
    if endpoint is None:
        if not no_containerd or not os.path.exists(socket_path(CRIO_ENDPOINT)):
            return None
        endpoint = CRIO_ENDPOINT
    elif _same_socket(endpoint, containerd) or (not no_containerd and not os.path.exists(socket_path(endpoint))):
        return None
    runtime = CriRuntime(endpoint, cfg.settings.timeout)
    try:
        version = runtime.version()
    except PinctlError:
        if no_containerd:
            raise  # nothing else to read: the endpoint's own error names it
        return None
    if version.name != RUNTIME_CRIO:
        return None
    return _node(cfg, runtime, version, warn)


def address_shown(cfg: Config) -> str:
    """The socket a long-running command names before it has opened the node: CRI-O's endpoint
    where detect() would look there first (no containerd named or at its default), else containerd's."""
    endpoint = cfg.settings.runtime_endpoint
    containerd = cfg.settings.containerd_address
    if cfg.defaulted("containerd_address") and not os.path.exists(containerd):
        if endpoint is not None and not _same_socket(endpoint, containerd):
            return endpoint
        if endpoint is None and os.path.exists(socket_path(CRIO_ENDPOINT)):
            return CRIO_ENDPOINT
    return containerd


def _same_socket(endpoint: str, path: str) -> bool:
    try:
        return os.path.realpath(socket_path(endpoint)) == os.path.realpath(path)
    except EngineError:
        return False


def _node(cfg: Config, runtime: CriRuntime, version: RuntimeVersion, warn: Callable[[str], None]) -> CrioNode:
    found = crio_process.find(runtime.endpoint)
    process = found if isinstance(found, CrioProcess) else None
    missing = found if isinstance(found, crio_process.NotFound) else None
    named = cfg.settings.crio_config
    if named is not None:
        return CrioNode(runtime, version, process, named, f"{named}.d", explicit=True, not_found=missing, notice=warn)
    if process is not None:
        return CrioNode(runtime, version, process, process.config_path, process.config_dir, notice=warn)
    return CrioNode(runtime, version, None, crio_config.CRIO_DEFAULT_PATH, crio_config.CRIO_DEFAULT_DIR,
                    not_found=missing, notice=warn)


@dataclass
class CrioSource:
    """CRI-O's images, one row per name, pinned as its configuration says (cri_pinned: as its CRI says now)."""

    crio: CrioNode
    description: str = ""

    def __post_init__(self) -> None:
        self.description = self.description or self.crio.describe()

    def add_rows(self, listing: Listing, policy: Policy, runtime_sizes: bool = True) -> None:
        # CRI-O's rows come from its CRI: their SIZE is its figure whatever runtime_sizes says.
        rows = crio_pins.rows_for(self.crio.images(), self.crio.config())
        annotate_policy(rows, policy)
        listing.rows.extend(rows)

    def add_names(self, names: list[Name]) -> None:
        names += [(None, ref) for image in self.crio.images() for ref in crio_pins.names_of(image) or [image.id]]

    def prefetch(self) -> None:
        self.crio.runtime.prefetch("images")

    def views(self) -> list[NamespaceView]:
        return []

    def refusal(self, selector: refs.Selector) -> Optional[str]:
        return None

    def follow(self) -> Optional[Followed]:
        return None

    def close(self) -> None:
        self.crio.runtime.close()


# -- pin, unpin, sync -------------------------------------------------------------------------


@dataclass
class CrioChange:
    """What one pin, unpin or sync did on CRI-O: an item per reference asked about, and what
    keeps an unpinned image pinned anyway."""

    results: list[ItemResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Image:
    """One image of the node: its ID and names, and its rows as ls has them."""

    id: str
    names: list[str]
    rows: list[ImageRow]

    @property
    def shown(self) -> str:
        return min(self.names or [self.id], key=lambda ref: ("@" in ref, ref))


def _images(rows: Sequence[ImageRow]) -> list[_Image]:
    found: dict[str, _Image] = {}
    for row in rows:
        image = found.setdefault(row.group_key, _Image(row.group_key, [], []))
        image.rows.append(row)
        if row.ref != row.image_id:
            image.names.append(row.ref)
    return list(found.values())


def _wanted(rows: Sequence[ImageRow], argument: str, dialect: str) -> list[_Image]:
    """The images an argument names: a reference (as CRI-O stores it, fully qualified), an ID or
    unique ID prefix, or a pattern (the images it matches now)."""
    images = _images(rows)
    if is_pattern(argument):
        pattern = parse_pattern(argument, dialect, "command line")
        return [image for image in images if any(matches(pattern, name) for name in image.names)]
    selector = refs.parse_selector(argument)
    named = {argument.lower(), selector.ref.lower()} if selector.ref else {argument.lower()}
    hits = [image for image in images if named & {name.lower() for name in image.names}]
    if hits or selector.id_prefix is None:
        return hits
    by_id = [image for image in images if any(id_matches(row, selector.id_prefix) for row in image.rows)]
    if len(by_id) > 1:
        # Never act on an image the operator may not have meant: as pin does on containerd.
        raise AmbiguousRef(f"{argument} is the start of {len(by_id)} image IDs", "give more of the ID")
    return by_id


def change(crio: CrioNode, policy: Optional[Policy], command: str, args: Sequence[str], dialect: str,
           dry_run: bool) -> CrioChange:
    """pin or unpin on CRI-O: pinctl's drop-in gains (pin) or loses (unpin) an exact item per
    image, and each item is judged by what CRI-O's CRI says before and after. The whole of it runs
    under the writers' lock, so concurrent changes each see the one before."""
    policy = policy or Policy()
    if dry_run:
        return _change(crio, policy, command, args, dialect, dry_run)
    crio.writable()  # nothing is written that CRI-O cannot be told of
    with crio_lock.held(crio.config_dir, crio.notice):
        return _change(crio, policy, command, args, dialect, dry_run)


def _change(crio: CrioNode, policy: Policy, command: str, args: Sequence[str], dialect: str,
            dry_run: bool) -> CrioChange:
    images = crio.images()
    config = crio.config()
    rows = crio_pins.rows_for(images, config)
    annotate_policy(rows, policy)
    wanted = [(argument, _wanted(rows, argument, dialect)) for argument in args]
    own = crio_pins.OwnEntries.of(config)
    outcome = CrioChange()
    planned: list[tuple[_Image, bool]] = []
    for argument, found in wanted:
        if not found:
            outcome.results.append(ItemResult(NO_NAMESPACE, argument, ACTION_FAILED,
                                              error="no image on this CRI-O has this name or ID (pinctl ls lists them)"))
        planned += [(image, _plan_one(image, own, command, argument)) for image in found]
    applied = crio_apply.apply(crio, config, own, images, dry_run)
    outcome.results += [_result(command, image, touched, applied) for image, touched in planned]
    if command == "unpin":
        outcome.warnings = _still_pinned(applied.config, policy, images, [image for image, _ in planned])
    return outcome


def _plan_one(image: _Image, own: crio_pins.OwnEntries, command: str, argument: str) -> bool:
    """Change pinctl's items for one image; whether they changed."""
    if command == "unpin":
        return bool(own.remove(image.names, crio_pins.OWNER_PIN))
    asked = _asked_name(argument, image)
    items = [asked] if asked else crio_pins.pin_items_for(image.names)
    return bool([item for item in items if own.add(item, crio_pins.OWNER_PIN)])


def _result(command: str, image: _Image, touched: bool, applied: crio_apply.Applied) -> ItemResult:
    """One image's outcome, as the CRI says it: pinned only when the CRI says so after."""
    if image.id not in applied.after or applied.after[image.id] is None:
        return ItemResult(NO_NAMESPACE, image.shown, ACTION_CHANGED_UNDER_US,
                          error="the image was removed from CRI-O meanwhile")
    before, after = applied.before.get(image.id, False), bool(applied.after[image.id])
    if command == "pin":
        if after:
            return ItemResult(NO_NAMESPACE, image.shown, ACTION_ALREADY_PINNED if before else ACTION_PINNED)
        return ItemResult(NO_NAMESPACE, image.shown, ACTION_FAILED, error=_not_pinned(applied))
    if after and not applied.expected.get(image.id, False):
        return ItemResult(NO_NAMESPACE, image.shown, ACTION_FAILED, error=applied.failure or (
            "CRI-O still reports it pinned, though its files no longer pin it"))
    return ItemResult(NO_NAMESPACE, image.shown, ACTION_UNPINNED if touched or (before and not after)
                      else ACTION_ALREADY_UNPINNED)


def _not_pinned(applied: crio_apply.Applied) -> str:
    config = applied.config
    if config.overriding:
        later = ", ".join(config.overriding)
        return (f"{later} sorts after pinctl's drop-in {config.dropin_path} and sets pinned_images, which replaces "
                f"pinctl's list: move its pinned_images into a file that sorts before {crio_config.PINCTL_DROPIN_NAME}")
    return applied.failure or "CRI-O applied its files, but its CRI does not report the image pinned"


def _asked_name(argument: str, image: _Image) -> Optional[str]:
    """The image's own spelling of the name asked for, when a name (not an ID or pattern) was."""
    if is_pattern(argument):
        return None
    wanted = {argument.lower(), crio_pins.normalised_name(argument).lower()}
    return next((name for name in image.names if name.lower() in wanted), None)


def _still_pinned(config: CrioConfig, policy: Policy, listed: Sequence[CriImage], images: Sequence[_Image]) -> list[str]:
    """For each image unpin was asked about: what keeps CRI-O pinning it (a site file's item, the
    pause image), or pins it again (a policy pattern at the next sync), by the files as written."""
    rows = crio_pins.rows_for(listed, config)
    annotate_policy(rows, policy)
    by_image = {row.group_key: row for row in rows}
    warnings: list[str] = []
    for image in images:
        row = by_image.get(image.id)
        if row is None:
            continue
        for reason in row.reasons:
            line = _keeps(image.shown, reason.kind, reason.detail, reason.source or "")
            if line and line not in warnings:
                warnings.append(line)
    return warnings


def _keeps(name: str, kind: str, detail: str, source: str) -> Optional[str]:
    if kind == REASON_CRIO_CONFIG:
        return f"{name}: CRI-O keeps it pinned: pinned_images item {detail!r} at {source}"
    if kind == REASON_SANDBOX:
        return f"{name}: CRI-O keeps it pinned: it is CRI-O's pause_image ({source})"
    if kind == REASON_CRIO_PIN and "sync" in source:
        return f"{name}: pinctl sync's item {detail!r} in its drop-in pins it"
    if kind == REASON_PATTERN:
        return f"{name}: pattern {detail} ({source}) pins it again at the next sync"
    return None


def sync(crio: CrioNode, policy: Policy, prune: bool, dry_run: bool) -> CrioChange:
    """pinctl's sync items become the policy in CRI-O's dialect (kept alongside the old ones
    unless prune); a pattern CRI-O cannot say is refused by name and the rest still written. Each
    image is judged by the CRI: "nothing to do" only when it already says what the files say."""
    if dry_run:
        return _sync(crio, policy, prune, dry_run)
    crio.writable()
    with crio_lock.held(crio.config_dir, crio.notice):
        return _sync(crio, policy, prune, dry_run)


def _sync(crio: CrioNode, policy: Policy, prune: bool, dry_run: bool) -> CrioChange:
    images = crio.images()
    items = crio_pins.policy_items(policy, images)
    config = crio.config()
    own = crio_pins.OwnEntries.of(config)
    if prune:
        own.replace(crio_pins.OWNER_SYNC, items.items)
    else:
        for item in items.items:
            own.add(item, crio_pins.OWNER_SYNC)
    outcome = CrioChange(warnings=[*items.notes])
    outcome.results += [ItemResult(NO_NAMESPACE, text, ACTION_FAILED, error="cannot be said in CRI-O's pinned_images")
                        for text in items.refused]
    applied = crio_apply.apply(crio, config, own, images, dry_run)
    if applied.failure is not None and not applied.reloaded:
        outcome.results.append(ItemResult(NO_NAMESPACE, config.dropin_path, ACTION_FAILED, error=applied.failure))
        return outcome
    for image in images:
        outcome.results += _synced(image, policy, applied)
    return outcome


def _synced(image: CriImage, policy: Policy, applied: crio_apply.Applied) -> list[ItemResult]:
    """What sync did to one image, by the CRI before and after: pinned, pruned (unpinned), kept
    (already pinned and covered by the policy), or failed where the CRI does not say what the
    files now say."""
    name = min(crio_pins.names_of(image) or [image.id], key=lambda ref: ("@" in ref, ref))
    was, now, will = applied.before.get(image.id, False), applied.after.get(image.id), applied.expected.get(image.id)
    if now is None:
        return [ItemResult(NO_NAMESPACE, name, ACTION_CHANGED_UNDER_US, error="removed from CRI-O meanwhile")]
    if now != will:
        return [ItemResult(NO_NAMESPACE, name, ACTION_FAILED, error=applied.failure or (
            "CRI-O applied its files, but its CRI does not report what they say"))]
    if now and not was:
        return [ItemResult(NO_NAMESPACE, name, ACTION_PINNED)]
    if was and not now:
        return [ItemResult(NO_NAMESPACE, name, ACTION_PRUNED)]
    if now and _covered(image, policy):
        return [ItemResult(NO_NAMESPACE, name, ACTION_ALREADY_PINNED)]
    return []


def _covered(image: CriImage, policy: Policy) -> bool:
    return any(matches(pattern, candidate) for pattern in policy.patterns for candidate in crio_pins.names_of(image))

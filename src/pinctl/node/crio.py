"""A CRI-O node: images read through the CRI alone, pins kept in pinctl's own CRI-O drop-in.

CRI-O has no image labels and no namespaces, and no containerd socket is involved. Its pins are
the effective ``pinned_images`` of its files (``pinctl.config.crio``) plus its pause image; pinctl
owns one drop-in, sorting after the site's, that carries the site's effective list over and adds
its own items. Every write is one atomic file replacement, then a SIGHUP to the crio process
behind the socket, then the CRI asked again until it says what the files say (read back).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from pinctl import refs
from pinctl.backends import procfs
from pinctl.backends.cri import CriRuntime, socket_path
from pinctl.config import crio as crio_config
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
    Action,
    ImageRow,
    ItemResult,
)
from pinctl.pins import crio as crio_pins
from pinctl.pins.listing import Listing, annotate_policy, id_matches
from pinctl.pins.patterns import is_pattern, matches, parse_pattern
from pinctl.pins.policy import Policy

if TYPE_CHECKING:
    from pinctl.backends.cri import CriImage, RuntimeVersion
    from pinctl.config.crio import CrioConfig, CrioEntry, Owner
    from pinctl.config.loader import Config
    from pinctl.node.sources import Followed, Name
    from pinctl.pins.plans import NamespaceView

# CRI-O's own default socket, where crictl looks for it.
DEFAULT_ENDPOINT = "unix:///run/crio/crio.sock"
# CRI-O applies a SIGHUP in a fraction of a second; the wait for the CRI to say so is generous,
# since a busy node must not turn a slow reload into a failed pin.
READ_BACK_S = 30.0
READ_BACK_POLL_S = 0.1
# ItemResult.namespace on a CRI-O node, which has none (shown as -).
NO_NAMESPACE = ""


# -- the crio process -------------------------------------------------------------------------
# CRI-O re-reads its pins only on SIGHUP (server/server.go, startReloadWatcher): a changed drop-in
# means nothing until then. pinctl finds the process serving the CRI socket (backends.procfs,
# through a cri-proxy too) and reads --config and --config-dir from its command line, so the files
# it shows are the ones CRI-O runs with.

NAME = "crio"
# CRI-O's own defaults for --config and --config-dir (pkg/config: CrioConfigPath, CrioConfigDropInPath).
DEFAULT_CONFIG = "/etc/crio/crio.conf"
DEFAULT_CONFIG_DIR = "/etc/crio/crio.conf.d"
# The reload to name when the crio process cannot be told (CrioSite.reload names its pid then).
RELOAD_ANY_CRIO = "systemctl reload crio (or: kill -HUP $(pidof crio))"
# How the CRI's Version call names CRI-O.
RUNTIME_NAME = "cri-o"


@dataclass(frozen=True)
class CrioProcess:
    """One crio process and the configuration it was started with."""

    pid: int
    config_path: str = DEFAULT_CONFIG
    config_dir: str = DEFAULT_CONFIG_DIR


def describe_process(pid: int, argv: list[str]) -> CrioProcess:
    flags = procfs.parse_flags(argv)
    config = flags.get("--config") or flags.get("-c") or os.environ.get("CONTAINER_CONFIG") or DEFAULT_CONFIG
    config_dir = flags.get("--config-dir") or flags.get("-d") or DEFAULT_CONFIG_DIR
    return CrioProcess(pid, procfs.as_seen_by(pid, config), procfs.as_seen_by(pid, config_dir))


def find_process(endpoint: str) -> Optional[CrioProcess]:
    """The crio process answering on endpoint (directly or behind pinctl cri-proxy); None when
    it cannot be told (another PID namespace, a remote socket)."""
    pid = procfs.serving(procfs.socket_path(endpoint))
    if pid is None or procfs.program(pid) != NAME:
        return None
    return describe_process(pid, procfs.cmdline(pid))


def signal_reload(process: CrioProcess) -> None:
    """SIGHUP: CRI-O re-reads its files and applies pinned_images and pause_image."""
    try:
        os.kill(process.pid, signal.SIGHUP)
    except ProcessLookupError:
        raise EngineError(f"CRI-O (pid {process.pid}) is gone", "is crio running?") from None
    except PermissionError:
        raise EngineError(f"cannot signal CRI-O (pid {process.pid}) to reload", "run pinctl as root (sudo)") from None


@dataclass
class CrioNode:
    """The CRI-O behind one CRI endpoint: the CRI, the crio process, and where its files are."""

    runtime: CriRuntime
    version: RuntimeVersion
    process: Optional[CrioProcess]
    config_path: str
    config_dir: str
    explicit: bool = False

    def config(self) -> CrioConfig:
        return crio_config.read_crio_config(self.config_path, self.explicit, dropin_dir=self.config_dir)

    def images(self) -> list[CriImage]:
        return self.runtime.list_images()

    def reload(self) -> None:
        if self.process is None:
            raise EngineError(f"cannot tell which process serves {self.runtime.endpoint}, so CRI-O cannot be told to "
                              "re-read its files", "reload it yourself: systemctl reload crio (or kill -HUP crio)")
        signal_reload(self.process)

    def describe(self) -> str:
        return f"CRI-O {self.version.version} at {self.runtime.endpoint}"

    def check_site(self) -> CrioSite:
        config = self.config()
        reload = (f"kill -HUP {self.process.pid} (or: systemctl reload crio)" if self.process
                  else RELOAD_ANY_CRIO)
        return CrioSite(reload, config.dropin_path, tuple(config.overriding))


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
    and the drop-ins that sort after it and set pinned_images (so pinctl's items count for nothing)."""

    reload: str
    dropin: str
    overriding: tuple[str, ...] = ()


def detect(cfg: Config, warn: Callable[[str], None]) -> Optional[CrioNode]:
    """The CRI-O node pinctl was pointed at (-r), or found where crictl looks when no containerd
    was named and none is at the default socket; None when the runtime is not CRI-O."""
    endpoint = cfg.settings.runtime_endpoint
    containerd = cfg.settings.containerd_address
    no_containerd = cfg.defaulted("containerd_address") and not os.path.exists(containerd)
    if endpoint is None:
        if not no_containerd or not os.path.exists(socket_path(DEFAULT_ENDPOINT)):
            return None
        endpoint = DEFAULT_ENDPOINT
    elif _same_socket(endpoint, containerd) or (not no_containerd and not os.path.exists(socket_path(endpoint))):
        return None
    runtime = CriRuntime(endpoint, cfg.settings.timeout)
    try:
        version = runtime.version()
    except PinctlError:
        if no_containerd:
            raise  # nothing else to read: the endpoint's own error names it
        return None
    if version.name != RUNTIME_NAME:
        return None
    return _node(cfg, runtime, version)


def address_shown(cfg: Config) -> str:
    """The socket a long-running command names before it has opened the node: CRI-O's endpoint
    where detect() would look there first (no containerd named or at its default), else containerd's."""
    endpoint = cfg.settings.runtime_endpoint
    containerd = cfg.settings.containerd_address
    if cfg.defaulted("containerd_address") and not os.path.exists(containerd):
        if endpoint is not None and not _same_socket(endpoint, containerd):
            return endpoint
        if endpoint is None and os.path.exists(socket_path(DEFAULT_ENDPOINT)):
            return DEFAULT_ENDPOINT
    return containerd


def _same_socket(endpoint: str, path: str) -> bool:
    try:
        return os.path.realpath(socket_path(endpoint)) == os.path.realpath(path)
    except EngineError:
        return False


def _node(cfg: Config, runtime: CriRuntime, version: RuntimeVersion) -> CrioNode:
    process = find_process(runtime.endpoint)
    named = cfg.settings.crio_config
    if named is not None:
        return CrioNode(runtime, version, process, named, f"{named}.d", explicit=True)
    if process is not None:
        return CrioNode(runtime, version, process, process.config_path, process.config_dir)
    return CrioNode(runtime, version, None, DEFAULT_CONFIG, DEFAULT_CONFIG_DIR)


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
    image; every argument is resolved before anything is written."""
    policy = policy or Policy()
    rows = _rows(crio, policy)
    wanted = [(argument, _wanted(rows, argument, dialect)) for argument in args]
    config = crio.config()
    own = crio_pins.OwnEntries.of(config)
    outcome = CrioChange()
    planned: list[tuple[_Image, Action]] = []
    for argument, images in wanted:
        if not images:
            outcome.results.append(ItemResult(NO_NAMESPACE, argument, ACTION_FAILED,
                                              error="no image on this CRI-O has this name or ID (pinctl ls lists them)"))
        for image in images:
            planned.append((image, _plan_one(image, own, command, argument)))
    changed = _dropin_stale(config, own)
    if changed and not dry_run:
        failure = _write_and_reload(crio, config, own)
        if failure is not None:
            outcome.results += [ItemResult(NO_NAMESPACE, image.shown, ACTION_FAILED, error=failure)
                                for image, _action in planned]
            return outcome
    after = {} if dry_run or not changed else _read_back(crio, [image for image, _ in planned])
    for image, action in planned:
        outcome.results.append(_result(image, action, after))
    if command == "unpin":
        outcome.warnings = _still_pinned(crio, policy, [image for image, _ in planned])
    return outcome


def _plan_one(image: _Image, own: crio_pins.OwnEntries, command: str, argument: str) -> Action:
    if command == "unpin":
        dropped = own.remove(image.names, crio_pins.OWNER_PIN)
        return ACTION_UNPINNED if dropped else ACTION_ALREADY_UNPINNED
    asked = _asked_name(argument, image)
    items = [asked] if asked else crio_pins.pin_items_for(image.names)
    added = [item for item in items if own.add(item, crio_pins.OWNER_PIN)]
    return ACTION_PINNED if added else ACTION_ALREADY_PINNED


def _asked_name(argument: str, image: _Image) -> Optional[str]:
    """The image's own spelling of the name asked for, when a name (not an ID or pattern) was."""
    if is_pattern(argument):
        return None
    wanted = {argument.lower(), crio_pins.normalised_name(argument).lower()}
    return next((name for name in image.names if name.lower() in wanted), None)


def _result(image: _Image, action: Action, after: dict[str, Optional[bool]]) -> ItemResult:
    pinned = after.get(image.id)
    if action == ACTION_PINNED and pinned is False:
        return ItemResult(NO_NAMESPACE, image.shown, ACTION_FAILED,
                          error="written and CRI-O reloaded, but its CRI does not report the image pinned")
    if image.id in after and pinned is None:
        return ItemResult(NO_NAMESPACE, image.shown, ACTION_CHANGED_UNDER_US,
                          error="the image was removed from CRI-O meanwhile")
    return ItemResult(NO_NAMESPACE, image.shown, action)


def _rows(crio: CrioNode, policy: Policy) -> list[ImageRow]:
    listing = Listing()
    CrioSource(crio).add_rows(listing, policy)
    return listing.rows


def _dropin_stale(config: CrioConfig, own: crio_pins.OwnEntries) -> bool:
    """Whether pinctl's drop-in differs from what it must say now: its own items changed, or a
    site file did (the drop-in sorts last, so a site item counts only once it is carried over)."""
    if not own.items and not os.path.exists(config.dropin_path):
        return False  # nothing of pinctl's: the site's files are effective as they are
    try:
        with open(config.dropin_path, encoding="utf-8") as handle:
            current: Optional[str] = handle.read()
    except OSError:
        current = None
    return current != crio_config.render_dropin(config.site_entries, own.items)


def _write_and_reload(crio: CrioNode, config: CrioConfig, own: crio_pins.OwnEntries) -> Optional[str]:
    """Re-read the files just before writing (a site file changed since planning is carried over
    as it is now), write pinctl's drop-in, reload CRI-O; the error text, or None."""
    try:
        fresh = crio.config()
        text = crio_config.render_dropin(fresh.site_entries, own.items)
        crio_config.write_dropin(fresh.dropin_path, text)
        crio.reload()
    except PinctlError as err:
        return str(err)
    return None


def _read_back(crio: CrioNode, images: Sequence[_Image]) -> dict[str, Optional[bool]]:
    """What the CRI says of each image once it has applied the files: asked until it agrees with
    what the files now say, or READ_BACK_S passes (then what it says last)."""
    deadline = time.monotonic() + READ_BACK_S
    while True:
        config = crio.config()
        listed = {image.id: image for image in crio.images()}
        said = {image.id: (listed[image.id].pinned if image.id in listed else None) for image in images}
        expected = {image.id: bool(crio_pins.reasons_for(crio_pins.names_of(listed[image.id]), config))
                    for image in images if image.id in listed}
        if all(said[key] == value for key, value in expected.items()) or time.monotonic() >= deadline:
            return said
        time.sleep(READ_BACK_POLL_S)


def _still_pinned(crio: CrioNode, policy: Policy, images: Sequence[_Image]) -> list[str]:
    """For each image unpin was asked about: what keeps CRI-O pinning it (a site file's item, the
    pause image), or pins it again (a policy pattern at the next sync)."""
    rows = {row.group_key: row for row in _rows(crio, policy)}
    warnings: list[str] = []
    for image in images:
        row = rows.get(image.id)
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
    unless prune); a pattern CRI-O cannot say is refused by name and the rest still written."""
    before = {row.group_key: row.pinned for row in _rows(crio, policy)}
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
    future = _future_pins(images, config, own)
    changed = _dropin_stale(config, own)
    if changed and not dry_run:
        failure = _write_and_reload(crio, config, own)
        if failure is not None:
            outcome.results.append(ItemResult(NO_NAMESPACE, config.dropin_path, ACTION_FAILED, error=failure))
            return outcome
    for image in images:
        name = min(crio_pins.names_of(image) or [image.id], key=lambda ref: ("@" in ref, ref))
        was, will = before.get(image.id, False), future.get(image.id, False)
        if will and not was:
            outcome.results.append(ItemResult(NO_NAMESPACE, name, ACTION_PINNED))
        elif was and not will:
            outcome.results.append(ItemResult(NO_NAMESPACE, name, ACTION_PRUNED))
        elif will and _covered(image, policy):
            outcome.results.append(ItemResult(NO_NAMESPACE, name, ACTION_ALREADY_PINNED))
    if changed and not dry_run:
        said = _read_back(crio, [_Image(image.id, crio_pins.names_of(image), []) for image in images])
        outcome.results = [_checked(result, images, said, future) for result in outcome.results]
    return outcome


def _future_pins(images: Sequence[CriImage], config: CrioConfig, own: crio_pins.OwnEntries) -> dict[str, bool]:
    """Whether each image is pinned once pinctl's drop-in holds own's items."""
    texts = [entry.text for entry in config.site_entries] + own.texts()
    return {image.id: any(crio_pins.item_matches(text, crio_pins.names_of(image)) for text in texts)
            or crio_pins.pause_matches(config.pause_image, crio_pins.names_of(image)) for image in images}


def _covered(image: CriImage, policy: Policy) -> bool:
    return any(matches(pattern, candidate) for pattern in policy.patterns for candidate in crio_pins.names_of(image))


def _checked(result: ItemResult, images: Sequence[CriImage], said: dict[str, Optional[bool]],
             future: dict[str, bool]) -> ItemResult:
    image = next((image for image in images if result.ref in crio_pins.names_of(image) or result.ref == image.id), None)
    if image is None or result.action == ACTION_FAILED:
        return result
    if said.get(image.id) is None:
        return ItemResult(NO_NAMESPACE, result.ref, ACTION_CHANGED_UNDER_US, error="removed from CRI-O meanwhile")
    if said[image.id] != future.get(image.id):
        return ItemResult(NO_NAMESPACE, result.ref, ACTION_FAILED,
                          error="CRI-O reloaded, but its CRI does not report what its files say")
    return result

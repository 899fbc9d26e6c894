"""Prometheus exposition: the metrics of sync --watch and of cri-proxy (served by metrics.serve),
and the textfiles of check and gc plan for node_exporter's textfile collector.

The prometheus_client library writes the text (and OpenMetrics) formats; it is imported here only,
and this module only by the commands that export. Every metric is declared once in METRICS: the
collectors, docs/monitoring.md's list and the alert rules' test all read it.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Literal, Optional, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from pinctl import __version__
from pinctl.errors import PinctlError, UsageError
from pinctl.watch import figures

if TYPE_CHECKING:
    from pinctl.check.compare import CheckResult
    from pinctl.criproxy.stats import ProxyFigures
    from pinctl.gc.plan import GcReport
    from pinctl.model import ImageRow
    from pinctl.pins.patterns import Pattern
    from pinctl.service.monitoring import Runtime
    from pinctl.watch.figures import CheckFigures, Figures, GcFigures, NodeFigures
    from pinctl.watch.health import Checker, WatchState

Kind = Literal["counter", "gauge", "info"]
# Which figures a metric comes from: the watcher's own counters, the listing, the CRI check, the GC model,
# cri-proxy's counters, and the config reloads that sync --watch and cri-proxy both count.
Group = Literal["watch", "node", "check", "gc", "info", "proxy", "config"]


@dataclass(frozen=True)
class MetricSpec:
    name: str  # as exposed: counters end in _total, the info metric in _info
    kind: Kind
    group: Group
    help: str
    labels: tuple[str, ...] = ()


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("pinctl_info", "info", "info", "pinctl's version and the CRI runtime's name and version (empty "
               "until the runtime answers).", ("version", "runtime", "runtime_version")),
    MetricSpec("pinctl_ready", "gauge", "watch", "1 when /readyz answers 200: the event stream is up since a "
               "full sync that succeeded."),
    MetricSpec("pinctl_event_stream_connected", "gauge", "watch", "1 while the watcher follows containerd's "
               "image events."),
    MetricSpec("pinctl_last_full_sync_timestamp_seconds", "gauge", "watch", "When the last full sync that "
               "succeeded finished (one runs at start and after every reconnect)."),
    MetricSpec("pinctl_last_full_sync_age_seconds", "gauge", "watch", "Seconds since the last full sync that "
               "succeeded."),
    MetricSpec("pinctl_full_syncs_total", "counter", "watch", "Full syncs that succeeded."),
    MetricSpec("pinctl_reconnects_total", "counter", "watch", "Times the watcher connected to containerd again "
               "after losing it."),
    MetricSpec("pinctl_image_events_total", "counter", "watch", "containerd image events the watcher received."),
    MetricSpec("pinctl_labels_written_total", "counter", "watch", "Pin labels the watcher wrote.", ("namespace",)),
    MetricSpec("pinctl_labels_removed_total", "counter", "watch", "Pin labels the watcher removed (--prune).",
               ("namespace",)),
    MetricSpec("pinctl_sync_errors_total", "counter", "watch", "What kept the watcher from its job, by kind.",
               ("kind",)),
    MetricSpec("pinctl_image_deletions_total", "counter", "watch", "Image deletions the watcher recorded in the "
               "journal (pinctl history): whether pinctl wanted the image kept, whether it was pinned the moment "
               "before, and who deleted it as far as the node can tell.", ("wanted", "pinned", "deleter")),
    MetricSpec("pinctl_config_reloads_total", "counter", "config", "Config reloads (on SIGHUP or a changed config "
               "file), by result; a failed one keeps the config in use.", ("result",)),
    MetricSpec("pinctl_config_last_reload_successful", "gauge", "config", "0 when the last config reload failed "
               "(the config in use is an older one), else 1."),
    MetricSpec("pinctl_check_errors_total", "counter", "watch", "Periodic checks that could not read a part "
               "(that part's metrics are then left out).", ("part",)),
    MetricSpec("pinctl_images", "gauge", "node", "Images (distinct image IDs) per namespace, and whether the "
               "runtime keeps them pinned.", ("namespace", "pinned")),
    MetricSpec("pinctl_images_size_bytes", "gauge", "node", "Size of those images, as the CRI reports sizes.",
               ("namespace", "pinned")),
    MetricSpec("pinctl_policy_references", "gauge", "node", "References a policy pattern covers, and whether "
               "their image carries the pin label.", ("namespace", "labelled")),
    MetricSpec("pinctl_policy_images", "gauge", "node", "Images each policy pattern covers, by state: pinned, "
               "unpinned (no pin label or CRI-O item), ignored (labelled, the runtime does not keep it); absent is "
               "1 when the pattern covers no image here.", ("pattern", "kind", "state")),
    MetricSpec("pinctl_drift_references", "gauge", "node", "References where labels and policy disagree: "
               "covered but unlabelled, or labelled but uncovered.", ("namespace", "drift")),
    MetricSpec("pinctl_last_check_timestamp_seconds", "gauge", "node", "When the images were last read."),
    MetricSpec("pinctl_cri_images", "gauge", "check", "Images the CRI runtime lists."),
    MetricSpec("pinctl_cri_mismatches", "gauge", "check", "Images whose pin pinctl and the CRI runtime "
               "disagree on, by cause.", ("cause",)),
    MetricSpec("pinctl_image_fs_capacity_bytes", "gauge", "gc", "Size of the image filesystem (statfs of the "
               "CRI's ImageFsInfo mount point)."),
    MetricSpec("pinctl_image_fs_available_bytes", "gauge", "gc", "Bytes available on the image filesystem."),
    MetricSpec("pinctl_image_fs_usage_ratio", "gauge", "gc", "The image filesystem's usage as the kubelet "
               "computes it (a whole percent, as a ratio)."),
    MetricSpec("pinctl_kubelet_image_gc_high_threshold_ratio", "gauge", "gc", "The kubelet's "
               "imageGCHighThresholdPercent as a ratio: image GC starts at this usage."),
    MetricSpec("pinctl_kubelet_image_gc_low_threshold_ratio", "gauge", "gc", "The kubelet's "
               "imageGCLowThresholdPercent as a ratio: image GC frees down to this usage."),
    MetricSpec("pinctl_gc_at_risk_images", "gauge", "gc", "Images pinctl's labels or policy want kept that the "
               "runtime does not pin: the kubelet's image GC may delete them."),
    MetricSpec("pinctl_gc_at_risk_size_bytes", "gauge", "gc", "Size of the images at risk."),
    MetricSpec("pinctl_gc_at_risk_deleted_images", "gauge", "gc", "Images at risk that the kubelet's next image "
               "GC run deletes, or may (a tie), at today's usage."),
    MetricSpec("pinctl_last_gc_plan_timestamp_seconds", "gauge", "gc", "When the GC model last ran."),
    MetricSpec("pinctl_cri_proxy_ready", "gauge", "proxy", "1 when cri-proxy's /readyz answers 200: it serves its "
               "socket and the last read of the pins succeeded."),
    MetricSpec("pinctl_cri_proxy_calls_total", "counter", "proxy", "CRI calls cri-proxy received and forwarded to "
               "the runtime, by runtime.v1 method (other: any other name).", ("method",)),
    MetricSpec("pinctl_cri_proxy_upstream_errors_total", "counter", "proxy", "Forwarded calls the runtime answered "
               "with an error, or did not answer (UNAVAILABLE), by gRPC status code.", ("code",)),
    MetricSpec("pinctl_cri_proxy_pin_reads_total", "counter", "proxy", "Reads of the pins (labels, policy, Docker) "
               "by result; read in the background after the runtime's image events (CRI-O: every --refresh seconds).", ("result",)),
    MetricSpec("pinctl_cri_proxy_passed_through_total", "counter", "proxy", "Image answers (ListImages, "
               "ImageStatus) passed through without pinctl's pins, by reason.", ("reason",)),
    MetricSpec("pinctl_cri_proxy_images_marked_total", "counter", "proxy", "Images cri-proxy reported pinned in "
               "answers where the runtime did not."),
    MetricSpec("pinctl_cri_proxy_remove_requests_total", "counter", "proxy", "RemoveImage calls cri-proxy saw, by "
               "outcome: forwarded (the runtime answered OK), failed (it answered an error), refused (the image is "
               "pinned: answered FAILED_PRECONDITION).", ("outcome",)),
    MetricSpec("pinctl_cri_proxy_pinned_keys", "gauge", "proxy", "The pinned set as last read: the wanted images' "
               "IDs, and their references and digests (matched when the runtime's ID is one pinctl lacks).",
               ("kind",)),
    MetricSpec("pinctl_cri_proxy_pins_age_seconds", "gauge", "proxy", "Seconds since the pins were last read "
               "successfully."),
)
SPECS = {spec.name: spec for spec in METRICS}


# -- metric families from figures ------------------------------------------------------------


def _family(name: str, labels: Iterable[tuple[tuple[str, ...], float]]) -> Metric:
    spec = SPECS[name]
    if spec.kind == "info":
        # One sample whose labels are the information; prometheus_client adds the _info suffix.
        ((values, _value),) = labels
        return InfoMetricFamily(name.removesuffix("_info"), spec.help, value=dict(zip(spec.labels, values)))
    family = (CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily)(name, spec.help, labels=spec.labels)
    for values, value in labels:
        family.add_metric(list(values), value)
    return family


def _one(name: str, value: float) -> Metric:
    return _family(name, [((), value)])


def _yes(value: bool) -> str:
    return "true" if value else "false"


def info_families(runtime: Optional[Runtime]) -> list[Metric]:
    values = (__version__, runtime.name if runtime else "", runtime.version if runtime else "")
    return [_family("pinctl_info", [(values, 1.0)])]


def node_families(node: NodeFigures, taken_at: Optional[float]) -> list[Metric]:
    found = [
        _family("pinctl_images", [((ns, _yes(pinned)), n) for (ns, pinned), n in node.images.items()]),
        _family("pinctl_images_size_bytes", [((ns, _yes(pinned)), n) for (ns, pinned), n in node.image_bytes.items()]),
        _family("pinctl_policy_references", [((ns, _yes(labelled)), n)
                                             for (ns, labelled), n in node.policy_refs.items()]),
        _family("pinctl_drift_references", [((ns, drift), n) for (ns, drift), n in node.drift.items()]),
        _family("pinctl_policy_images", [(key, n) for key, n in sorted(node.patterns.items())]),
    ]
    if taken_at is not None:
        found.append(_one("pinctl_last_check_timestamp_seconds", taken_at))
    return found


def check_families(check: CheckFigures) -> list[Metric]:
    return [_one("pinctl_cri_images", check.images),
            _family("pinctl_cri_mismatches", [((cause,), n) for cause, n in check.mismatches.items()])]


def gc_families(gc: GcFigures, taken_at: Optional[float]) -> list[Metric]:
    found = [
        _one("pinctl_image_fs_capacity_bytes", gc.capacity_bytes),
        _one("pinctl_image_fs_available_bytes", gc.available_bytes),
        _one("pinctl_image_fs_usage_ratio", gc.usage_percent / 100),
        _one("pinctl_kubelet_image_gc_high_threshold_ratio", gc.high_threshold_percent / 100),
        _one("pinctl_kubelet_image_gc_low_threshold_ratio", gc.low_threshold_percent / 100),
        _one("pinctl_gc_at_risk_images", gc.at_risk),
        _one("pinctl_gc_at_risk_size_bytes", gc.at_risk_bytes),
        _one("pinctl_gc_at_risk_deleted_images", gc.at_risk_deleted),
    ]
    if taken_at is not None:
        found.append(_one("pinctl_last_gc_plan_timestamp_seconds", taken_at))
    return found


def figure_families(figures: Figures) -> list[Metric]:
    """What a periodic check found; parts it could not read are left out, not shown stale."""
    found: list[Metric] = []
    if figures.node is not None:
        found += node_families(figures.node, figures.taken_at)
    if figures.check is not None:
        found += check_families(figures.check)
    if figures.gc is not None:
        found += gc_families(figures.gc, figures.taken_at)
    return found


def watch_families(state: WatchState) -> list[Metric]:
    found = [
        _one("pinctl_ready", float(state.readiness().ok)),
        _one("pinctl_event_stream_connected", float(state.connected)),
        _one("pinctl_full_syncs_total", state.full_syncs),
        _one("pinctl_reconnects_total", state.reconnects),
        _one("pinctl_image_events_total", state.events),
        _family("pinctl_labels_written_total", [((ns,), n) for ns, n in sorted(dict(state.labels_written).items())]),
        _family("pinctl_labels_removed_total", [((ns,), n) for ns, n in sorted(dict(state.labels_removed).items())]),
        _family("pinctl_sync_errors_total", [((kind,), n) for kind, n in dict(state.sync_errors).items()]),
        _family("pinctl_image_deletions_total", [(key, n) for key, n in sorted(dict(state.deletions).items())]),
        *config_families(dict(state.reloads), state.last_reload_ok),
    ]
    if state.last_full_sync is not None:
        found.append(_one("pinctl_last_full_sync_timestamp_seconds", state.last_full_sync))
        found.append(_one("pinctl_last_full_sync_age_seconds", max(0.0, state.wall() - state.last_full_sync)))
    return found


def config_families(reloads: dict[str, int], last_ok: bool) -> list[Metric]:
    return [_family("pinctl_config_reloads_total", [((result,), n) for result, n in reloads.items()]),
            _one("pinctl_config_last_reload_successful", float(last_ok))]


def proxy_families(found: ProxyFigures) -> list[Metric]:
    families = [
        _one("pinctl_cri_proxy_ready", float(found.ready)),
        _family("pinctl_cri_proxy_calls_total", [((method,), n) for method, n in found.calls.items()]),
        _family("pinctl_cri_proxy_upstream_errors_total", [((code,), n) for code, n in found.upstream_errors.items()]),
        _family("pinctl_cri_proxy_pin_reads_total", [((result,), n) for result, n in found.pin_reads.items()]),
        _family("pinctl_cri_proxy_passed_through_total", [((why,), n) for why, n in found.passed_through.items()]),
        _one("pinctl_cri_proxy_images_marked_total", found.images_marked),
        _family("pinctl_cri_proxy_remove_requests_total",
                [((outcome,), n) for outcome, n in found.remove_requests.items()]),
        *config_families(found.config_reloads, found.last_reload_ok),
    ]
    if found.pinned_keys is not None:
        keys = found.pinned_keys
        families.append(_family("pinctl_cri_proxy_pinned_keys", [((kind,), n) for kind, n in keys.items()]))
    if found.pins_age is not None:
        families.append(_one("pinctl_cri_proxy_pins_age_seconds", found.pins_age))
    return families


class FamiliesCollector(Collector):
    """A collector whose families are worked out at each scrape from state already in memory."""

    def __init__(self, families: Callable[[], list[Metric]]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families()


def registry_of(families: Callable[[], list[Metric]]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FamiliesCollector(families))
    return registry


def watcher_registry(state: WatchState, checker: Optional[Checker]) -> CollectorRegistry:
    def families() -> list[Metric]:
        latest = checker.latest if checker is not None else None
        found = info_families(latest.runtime if latest else None) + watch_families(state)
        if checker is not None:
            found.append(_family("pinctl_check_errors_total", [((part,), n) for part, n in dict(checker.errors).items()]))
        if latest is not None:
            found += figure_families(latest)
        return found

    return registry_of(families)


def proxy_registry(figures: Callable[[], ProxyFigures]) -> CollectorRegistry:
    def families() -> list[Metric]:
        found = figures()
        return info_families(found.runtime) + proxy_families(found)

    return registry_of(families)


def text_of(families: list[Metric]) -> str:
    from prometheus_client.exposition import generate_latest

    return generate_latest(registry_of(lambda: families)).decode("utf-8")


# -- textfiles for node_exporter ---------------------------------------------------------------
# check and gc plan share no metric, so both files can sit in one textfile directory: the
# collector refuses a series that two files give.


def check_textfile(rows: Sequence[ImageRow], namespaces: Sequence[str], result: CheckResult,
                   patterns: Sequence[Pattern] = ()) -> list[Metric]:
    now = time.time()
    return (info_families(figures.runtime_of(result.runtime))
            + node_families(figures.node_figures(rows, namespaces, patterns), now)
            + check_families(figures.check_figures(result)))


def gc_textfile(report: GcReport) -> list[Metric]:
    return gc_families(figures.gc_figures(report), time.time())



def check_textfile_target(path: str) -> None:
    """Fail now, before any work, when the textfile cannot be written: by creating and removing a
    temporary file beside it, as the real write will."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"--textfile {path}: the directory {directory} does not exist",
                         "create it, or point --textfile at node_exporter's --collector.textfile.directory")
    try:
        handle, probe = tempfile.mkstemp(prefix=".pinctl-", suffix=".tmp", dir=directory)
    except OSError as err:
        raise UsageError(f"--textfile {path}: cannot write in {directory}: {err.strerror}",
                         "run pinctl as a user who may write there, or pick another directory") from None
    os.close(handle)
    os.unlink(probe)


def write_textfile(path: str, families: list[Metric]) -> None:
    """Write the families to path atomically: a temporary file in the same directory (a name the
    textfile collector ignores), flushed to disk, then renamed over path. A reader sees the old
    file or the new one, never half of one."""

    directory = os.path.dirname(os.path.abspath(path))
    text = text_of(families)
    temporary = ""
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except OSError as err:
        if temporary:
            _discard(temporary)
        raise PinctlError(f"cannot write the textfile {path}: {err.strerror}") from None


def _discard(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass

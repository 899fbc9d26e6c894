"""sync --watch: keep the policy's pins true while containerd runs, restarts and changes.

A full sync at start and after every reconnect catches up on whatever happened unseen; in
between, every image create or update event is synced on its own, within the second. The
watcher's own label writes come back as update events and are then no-ops, so it never loops.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, TextIO

from pinctl.errors import PinctlError
from pinctl.model import ItemResult
from pinctl.service import namespaces as ns_select
from pinctl.service import pinning

if TYPE_CHECKING:
    from pinctl.backends.containerd import ContainerdStore, ImageEvents
    from pinctl.service.policy import Policy

CHANGING_TOPICS = ("/images/create", "/images/update")
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 10.0


class Log:
    """One line per action on stderr: readable text, or JSON for log shippers."""

    def __init__(self, fmt: str, stream: TextIO = sys.stderr) -> None:
        self.fmt = fmt
        self.stream = stream

    def __call__(self, level: str, message: str, **fields: Any) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if self.fmt == "json":
            line = json.dumps({"time": now, "level": level, "msg": message, **fields}, sort_keys=True)
        else:
            extra = " ".join(f"{k}={v}" for k, v in sorted(fields.items()))
            line = f"{now} {level} {message}" + (f" ({extra})" if extra else "")
        self.stream.write(line + "\n")
        self.stream.flush()


@dataclass
class Settings:
    """What a (re)load of the configuration gives the watcher."""

    store: ContainerdStore
    policy: Policy
    requested_namespaces: list[str]


class Watcher:
    def __init__(self, load: Callable[[], Settings], log: Log, prune: bool) -> None:
        self.load = load
        self.log = log
        self.prune = prune
        self.settings = load()
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._stream: Optional[ImageEvents] = None

    # -- signals ----------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.stop())
        signal.signal(signal.SIGINT, lambda *_: self.stop())
        signal.signal(signal.SIGHUP, lambda *_: self.request_reload())

    def stop(self) -> None:
        self._stop.set()
        self._interrupt()

    def request_reload(self) -> None:
        self._reload.set()
        self._interrupt()

    def _interrupt(self) -> None:
        if self._stream is not None:
            self._stream.cancel()

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        self.log("info", "watching", address=self.settings.store.address, patterns=len(self.settings.policy.patterns))
        delay = BACKOFF_FIRST
        while not self._stop.is_set():
            try:
                self._reload_if_asked()
                self._session()
                delay = BACKOFF_FIRST
            except PinctlError as err:
                if self._stop.is_set():
                    break
                self.log("warning", "containerd unreachable, retrying", error=str(err), retry_in=f"{delay:g}s")
                self._stop.wait(delay)
                delay = min(delay * 2, BACKOFF_MAX)
        self.log("info", "stopped")
        return 0

    def _session(self) -> None:
        """Subscribe first, then sync everything, then follow the events: nothing falls between."""
        store = self.settings.store
        self._stream = store.subscribe_images()
        try:
            namespaces = self._full_sync()
            for namespace, topic, name in self._stream:
                if self._stop.is_set() or self._reload.is_set():
                    break
                if topic in CHANGING_TOPICS and self._watched(namespace, namespaces):
                    self._sync_one(namespace, name)
        finally:
            self._stream.cancel()
            self._stream = None

    def _reload_if_asked(self) -> None:
        if not self._reload.is_set():
            return
        self._reload.clear()
        try:
            self.settings = self.load()
        except PinctlError as err:
            self.log("error", "config reload failed, keeping the previous one", error=str(err))
            return
        self.log("info", "config reloaded", patterns=len(self.settings.policy.patterns))

    def _watched(self, namespace: str, present: list[str]) -> bool:
        requested = self.settings.requested_namespaces
        if ns_select.ALL in requested:
            return True
        return namespace in (requested or ns_select.DEFAULT_NAMESPACES) or namespace in present

    def _full_sync(self) -> list[str]:
        s = self.settings
        namespaces = ns_select.select_namespaces(s.store, s.requested_namespaces)
        plan = pinning.make_sync_plan([pinning.NamespaceView(s.store, ns) for ns in namespaces], s.policy, self.prune)
        results = pinning.apply_plan(plan, dry_run=False)
        self._report(results)
        changed = sum(r.action in ("pinned", "pruned") for r in results)
        self.log("info", "full sync", namespaces=",".join(namespaces) or "-", changed=changed, covered=len(results))
        return namespaces

    def _sync_one(self, namespace: str, name: str) -> None:
        s = self.settings
        image = s.store.get_image(namespace, name)
        if image is None:
            return
        plan = pinning.make_one_sync_plan(s.store, namespace, image, s.policy, self.prune)
        self._report(pinning.apply_plan(plan, dry_run=False))

    def _report(self, results: list[ItemResult]) -> None:
        for r in results:
            if r.action in ("pinned", "pruned"):
                self.log("info", r.action, namespace=r.namespace, ref=r.ref)
            elif r.failed:
                self.log("error", "failed", namespace=r.namespace, ref=r.ref, error=r.error or "")

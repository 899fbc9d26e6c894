"""containerd over its gRPC API: namespaces, image records, content and label updates."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional, Sequence

from pinctl.backends import _grpc, oci, sigint_deferred
from pinctl.backends import guard as writes
from pinctl.backends.cri import CriRuntime
from pinctl.backends.targets import TargetCache, default_cache_path, read_targets
from pinctl.config.containerd import ContainerdConfig, read_containerd_config, rules_for
from pinctl.errors import EngineError, UnknownNamespace
from pinctl.model import (
    VERDICT_FAILED,
    ConfigPin,
    Descriptor,
    LabelChange,
    ResolvedTarget,
    StoredImage,
    WriteOutcome,
)

if TYPE_CHECKING:
    import grpc

DEFAULT_ADDRESS = "/run/containerd/containerd.sock"
NAMESPACE_HEADER = "containerd-namespace"
LIST_IMAGES = "/containerd.services.images.v1.Images/List"
# Guarded label writes (set_labels) run in a window of groups: each group's records are read
# again (one read window, _grpc.WINDOW), then its writes sent, while the writes of the group
# before it are still on their way: 128 calls in flight at most. On 2 cores (pinctl's thread on
# one, containerd's on the other) that is the overlap there is; deeper, the writes only queue for
# bolt's one writer, each against its own deadline. The measurements: docs/benchmarks.md's
# history (git log -p), "pin of 1,000 references in a window".
WRITE_GROUP = _grpc.WINDOW
WRITE_DEPTH = 2


class ContainerdStore:
    """An ImageStore backed by one containerd daemon."""

    def __init__(
        self, address: str = DEFAULT_ADDRESS, timeout: float = 2.0, config_path: Optional[str] = None
    ) -> None:
        self.address = address
        self.timeout = timeout
        self.config_path = config_path
        # Two channels: content reads run on their own (see _stub), everything else on the first.
        self._channels: dict[bool, grpc.Channel] = {}
        self._stubs: dict[str, Any] = {}
        # What targets resolved to: a digest names the same content for ever, so only the
        # manifests of images new since the last run (or, for a service, the last event) are read.
        self._targets = TargetCache(default_cache_path())
        # Record listings started ahead (prefetch_images), by namespace, for list_images to take.
        self._started: dict[str, Any] = {}
        self._rules: Optional[str] = None  # its config's merge rules, once its version is known
        # Its config as merged by those rules, read once while connected: ls asks for the sandbox
        # image and for 2.x's own pinned_images, which come from the same files (containerd
        # itself reads them at start only, and a restart ends this connection).
        self._config: Optional[tuple[str, Optional[ContainerdConfig]]] = None

    # -- plumbing ------------------------------------------------------------------------

    def _stub(self, name: str) -> Any:
        if name not in self._stubs:
            # A content read is a short stream read to its end at once by the caller's thread:
            # on a channel of its own, gRPC reads it in that thread, with no hand-off to its
            # polling thread per message (a third faster over 10,000 manifests). The event
            # stream, cancelled from another thread, stays on the ordinary channel.
            reads = name == "content"
            if reads not in self._channels:
                _grpc.check_socket(self.address, "containerd", "--address or CONTAINERD_ADDRESS")
                self._channels[reads] = _grpc.open_channel(self.address, single_threaded_streams=reads)
            self._stubs[name] = _STUB_FACTORIES[name](self._channels[reads])
        return self._stubs[name]

    def _metadata(self, namespace: Optional[str]) -> tuple[tuple[str, str], ...]:
        return ((NAMESPACE_HEADER, namespace),) if namespace else ()

    def _fail(self, err: Exception) -> EngineError:
        return _grpc.translate(err, "containerd", self.address, self.timeout)

    def _unary(self, service: str, method: str, request: Any, namespace: Optional[str] = None) -> Any:
        call: Callable[..., Any] = getattr(self._stub(service), method)  # checks the socket first
        import grpc

        try:
            return call(request, metadata=self._metadata(namespace), timeout=self.timeout)
        except grpc.RpcError as err:
            raise self._fail(err) from None

    def close(self) -> None:
        for started in self._started.values():
            started.cancel()
        self._started.clear()
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        self._stubs.clear()
        self._rules = None  # a containerd started again may be another release
        self._config = None

    # -- ImageStore ----------------------------------------------------------------------

    def version(self) -> str:
        from google.protobuf import empty_pb2

        return str(self._unary("version", "Version", empty_pb2.Empty()).version)

    def namespaces(self) -> list[str]:
        self._stub("namespaces")  # the socket first: where none is (a Docker node), protobuf never loads
        from pinctl.proto import namespaces_pb2

        reply = self._unary("namespaces", "List", namespaces_pb2.ListNamespacesRequest())
        return sorted(ns.name for ns in reply.namespaces)

    def require_namespaces(self, wanted: Sequence[str]) -> None:
        present = set(self.namespaces())
        missing = [ns for ns in wanted if ns not in present]
        if missing:
            raise UnknownNamespace(
                f"namespace {missing[0]} does not exist in containerd at {self.address}",
                f"existing: {', '.join(sorted(present)) or 'none'}; use -n with one of them or -n all",
            )

    def get_images(self, namespace: str, names: Sequence[str]) -> list[StoredImage]:
        """Many records at once (the calls overlap); the ones gone meanwhile are left out."""
        import grpc

        from pinctl.proto import images_pb2

        stub = self._stub("images")
        metadata = self._metadata(namespace)

        def start(name: str) -> Any:
            return stub.Get.future(images_pb2.GetImageRequest(name=name), metadata=metadata, timeout=self.timeout)

        found: list[StoredImage] = []
        for _name, future in _grpc.in_window(names, start):
            try:
                found.append(_stored_image(future.result().image))
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.NOT_FOUND:
                    raise self._fail(err) from None
        return found

    def subscribe_images(self) -> ImageEvents:
        """A live stream of image record changes in every namespace; cancel() ends it."""
        from pinctl.proto import events_pb2

        request = events_pb2.SubscribeRequest(filters=['topic~="^/images/"'])
        # No deadline: the stream is meant to stay open for as long as the watcher runs.
        return ImageEvents(self._stub("events").Subscribe(request), self)

    def prefetch_images(self, namespace: str) -> None:
        """Start listing the namespace's records now, for a caller with other work to do first:
        containerd reads and encodes them meanwhile, and the next list_images(namespace) takes
        that answer. A failure shows when it is taken. One nobody took is dropped, as
        CriRuntime.prefetch drops one: an answer is never older than its ask."""
        stale = self._started.pop(namespace, None)
        if stale is not None:
            stale.cancel()
        self._started[namespace] = _grpc.start_listing(self._list_start(namespace, "images_raw_list"), self.timeout)

    def list_images(self, namespace: str) -> list[StoredImage]:
        """Every record: one answer of any size, awaited while containerd answers (_grpc.listing)."""
        from pinctl.proto import images_pb2

        records = self._listing(namespace, "images_raw_list", self._started.pop(namespace, None)).images
        decode = images_pb2.Image.FromString
        return [_stored_image(decode(record)) for record in records]

    def list_names(self, namespace: str) -> list[str]:
        """Every record's name, the rest of each record skipped (no per-record decoding in Python)."""
        return [record.name for record in self._listing(namespace, "images_names_list").images]

    def _list_start(self, namespace: str, stub: str) -> Callable[[float], Any]:
        from pinctl.proto import images_pb2

        listing = self._stub(stub)
        metadata = self._metadata(namespace)
        return lambda deadline: listing.future(images_pb2.ListImagesRequest(), metadata=metadata, timeout=deadline)

    def _listing(self, namespace: str, stub: str, started: Any = None) -> Any:
        from google.protobuf import empty_pb2

        version = self._stub("version")

        def probe() -> Any:
            return version.Version.future(empty_pb2.Empty(), timeout=self.timeout)

        def fail(err: Any, waited: float) -> EngineError:
            return _grpc.translate(err, "containerd", self.address, waited)

        return _grpc.listing(self._list_start(namespace, stub), probe, self.timeout, fail, started)

    def resolve_targets(self, namespace: str, targets: Iterable[str], again: bool = False
                        ) -> dict[str, ResolvedTarget]:
        """Sizes count the blobs below the target for this host's platform (see ResolvedTarget).
        Targets resolved before, in this process or a run before it, are not read again
        (backends/targets.py) unless again; failures always are."""
        return self._targets.resolve(targets, lambda digests: read_targets(
            lambda wanted: self._read_json_blobs(namespace, wanted), digests), again)

    def config_labels(self, namespace: str, config_digests: Iterable[str]) -> dict[str, dict[str, str]]:
        """The labels in each image config (what `docker inspect` shows as Config.Labels)."""
        documents = self._read_json_blobs(namespace, sorted(set(config_digests)))
        return {digest: oci.config_labels(doc) for digest, doc in documents.items() if not isinstance(doc, str)}

    def content_times(self, namespace: str, digests: Iterable[str]) -> dict[str, float]:
        """When each blob was committed to the namespace's content store (seconds since the
        epoch); blobs it does not hold are left out. Label updates do not move it."""
        import grpc

        from pinctl.proto import content_pb2

        stub = self._stub("content")
        metadata = self._metadata(namespace)

        def start(digest: str) -> Any:
            return stub.Info.future(content_pb2.InfoRequest(digest=digest), metadata=metadata, timeout=self.timeout)

        times: dict[str, float] = {}
        for digest, future in _grpc.in_window(sorted(set(digests)), start):
            try:
                committed = future.result().info.committed_at
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.NOT_FOUND:
                    raise self._fail(err) from None
                continue
            if committed.seconds > 0:
                times[digest] = committed.seconds + committed.nanos / 1e9
        return times

    def _read_json_blobs(self, namespace: str, digests: Sequence[str]) -> dict[str, Any]:
        """Read many small blobs at once; a blob that cannot be read maps to its error text."""
        import grpc

        from pinctl.proto import content_pb2

        stub = self._stub("content")
        metadata = self._metadata(namespace)

        def start(digest: str) -> Any:
            return stub.Read(content_pb2.ReadContentRequest(digest=digest), metadata=metadata, timeout=self.timeout)

        out: dict[str, Any] = {}
        # A window of streams in flight runs them concurrently in gRPC's core, each within its
        # own deadline, in memory that does not grow with the number of images.
        for digest, stream in _grpc.in_window(digests, start):
            try:
                out[digest] = oci.parse(b"".join(chunk.data for chunk in stream))
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.NOT_FOUND:
                    out[digest] = "content missing (not pulled for this platform?)"
                else:
                    raise self._fail(err) from None
            except ValueError as err:
                out[digest] = f"unreadable manifest: {err}"
        return out

    def set_labels(self, namespace: str, changes: Sequence[tuple[StoredImage, LabelChange]]) -> list[WriteOutcome]:
        """Guarded writes (see pinctl.backends.guard) in a window (_grpc.in_window): each group of
        WRITE_GROUP records is read again just before its writes are sent, while the writes of up
        to WRITE_DEPTH - 1 groups before it are still on their way. Once containerd stops
        answering, or a SIGINT comes, nothing more is sent: the groups sent are finished (every
        write's answer awaited and checked, one that landed elsewhere undone) and the rest are
        reported not tried, so a daemon that stops costs about one timeout, not one per group."""
        groups = [changes[start : start + WRITE_GROUP] for start in range(0, len(changes), WRITE_GROUP)]
        halt: list[WriteOutcome] = []  # why nothing more is sent, once something says so
        outcomes: list[WriteOutcome] = []
        with sigint_deferred() as interrupted:

            def to_send() -> Iterator[Sequence[tuple[StoredImage, LabelChange]]]:
                for group in groups:
                    if halt or interrupted():
                        return
                    yield group

            def send(group: Sequence[tuple[StoredImage, LabelChange]]) -> _SentGroup:
                sent = self._send_group(namespace, group, interrupted)
                if sent.halted is not None and not halt:
                    halt.append(sent.halted)
                return sent

            for group, sent in _grpc.in_window(to_send(), send, WRITE_DEPTH):
                done = self._finish_group(namespace, group, sent)
                stalled = next((o for o in done if o.stalled), None)
                if stalled is not None and not halt:
                    halt.append(stalled)
                outcomes += done
        return outcomes + [_not_tried(halt[0]) if halt else writes.INTERRUPTED] * (len(changes) - len(outcomes))

    def _send_group(self, namespace: str, group: Sequence[tuple[StoredImage, LabelChange]],
                    interrupted: Callable[[], bool]) -> _SentGroup:
        """Read every record of the group, and send the writes of those still as planned."""
        currents = self._current_records(namespace, [planned.name for planned, _ in group])
        stall = next((c for c in currents if isinstance(c, WriteOutcome) and c.stalled), None)
        if stall is not None or interrupted():
            halted = stall or writes.INTERRUPTED  # nothing of this group was written
            return _SentGroup(dict.fromkeys(range(len(group)), halted), [], [], halted)
        decided: dict[int, WriteOutcome] = {}
        todo: list[tuple[int, StoredImage]] = []
        for i, ((planned, change), current) in enumerate(zip(group, currents)):
            verdict = current if isinstance(current, WriteOutcome) else writes.precheck(planned, current, change)
            if verdict is not None:
                decided[i] = verdict
            elif isinstance(current, StoredImage):
                todo.append((i, current))
        return _SentGroup(decided, todo, self._send_updates(namespace, [(current, group[i][1]) for i, current in todo]))

    def _finish_group(self, namespace: str, group: Sequence[tuple[StoredImage, LabelChange]],
                      sent: _SentGroup) -> list[WriteOutcome]:
        """Each write's answer, checked against the plan: one that reached a re-pointed record is undone."""
        outcomes = dict(sent.decided)
        undo: list[tuple[int, StoredImage, StoredImage]] = []
        for (i, before), after in zip(sent.todo, self._answers(sent.updates)):
            if isinstance(after, WriteOutcome):
                outcomes[i] = after
            elif writes.landed_elsewhere(group[i][0], after):
                undo.append((i, before, after))
            else:
                outcomes[i] = writes.WRITTEN
        outcomes.update(self._undo(namespace, group, undo))
        return [outcomes[i] for i in range(len(group))]

    def _undo(
        self, namespace: str, window: Sequence[tuple[StoredImage, LabelChange]],
        landed: Sequence[tuple[int, StoredImage, StoredImage]],
    ) -> dict[int, WriteOutcome]:
        """Take back the writes that reached a re-pointed record, and report each as moved."""
        repairs = [(i, after, writes.undo(before, after, window[i][1])) for i, before, after in landed]
        needed = [(i, after, change) for i, after, change in repairs if change]
        undone = self._answers(self._send_updates(namespace, [(a, c) for _, a, c in needed]))
        results = dict(zip((i for i, _, _ in needed), undone))
        outcomes: dict[int, WriteOutcome] = {}
        for i, after, _ in repairs:
            result = results.get(i)
            error = result.detail if isinstance(result, WriteOutcome) else None
            outcomes[i] = writes.moved_after_write(window[i][0], after, error)
        return outcomes

    def _current_records(self, namespace: str, names: Sequence[str]) -> list[Optional[StoredImage] | WriteOutcome]:
        """Each record as it is now: None when gone, a failure when it cannot be read."""
        from pinctl.proto import images_pb2

        stub = self._stub("images")
        metadata = self._metadata(namespace)

        def start(name: str) -> Any:
            return stub.Get.future(images_pb2.GetImageRequest(name=name), metadata=metadata, timeout=self.timeout)

        # A group (WRITE_GROUP) is one read window: all of it in flight at once.
        return [self._record_or_failure(future, missing_ok=True) for _name, future in _grpc.in_window(names, start)]

    def _send_updates(self, namespace: str, updates: Sequence[tuple[StoredImage, LabelChange]]) -> list[Any]:
        """Field-masked label updates, sent at once (a group's worth): their futures."""
        stub = self._stub("images")
        metadata = self._metadata(namespace)
        return [stub.Update.future(_label_update(image, change), metadata=metadata, timeout=self.timeout)
                for image, change in updates]

    def _answers(self, futures: Sequence[Any]) -> list[Any]:
        """Each update's record as written (a StoredImage) or a failure (a WriteOutcome)."""
        return [_unknown_if_stalled(self._record_or_failure(future, missing_ok=False)) for future in futures]

    def _record_or_failure(self, future: Any, missing_ok: bool) -> Optional[StoredImage] | WriteOutcome:
        import grpc

        try:
            return _stored_image(future.result().image)
        except grpc.RpcError as err:
            if err.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                return WriteOutcome(VERDICT_FAILED, str(self._fail(err)), stalled=True)
            if err.code() == grpc.StatusCode.NOT_FOUND and missing_ok:
                return None
            return writes.failed(_update_error(err, self))

    def sandbox_image(self) -> Optional[str]:
        read = self._merged_config()
        return None if read is None or read.sandbox is None else read.sandbox[0]

    def config_pins(self) -> list[ConfigPin]:
        """The entries of containerd 2.x's own pinned_images, from the same config."""
        read = self._merged_config()
        return [] if read is None else read.pins

    def _merged_config(self) -> Optional[ContainerdConfig]:
        rules = self._merge_rules()
        if self._config is None or self._config[0] != rules:
            self._config = (rules, read_containerd_config(self.config_path, rules))
        return self._config[1]

    def _merge_rules(self) -> str:
        """How this containerd merges its config's imports, by its version (2.3 changed it)."""
        if self._rules is None:
            try:
                self._rules = rules_for(self.version())
            except EngineError:
                return rules_for(None)
        return self._rules

    @contextlib.contextmanager
    def cri_image_sizes(self) -> Iterator[Callable[[], Optional[dict[str, int]]]]:
        """Each image's size by image ID as this containerd's CRI (served on the same socket, for
        namespace k8s.io) tells the kubelet, asked for on entry: the function given takes the
        answer, None when it serves no CRI or cannot say now. Asked before the namespace's own
        listing, the CRI answers while that one is read; the CRI's channel is closed on exit,
        also when the caller fails before taking the answer."""
        runtime = CriRuntime(self.address, self.timeout)

        def sizes() -> Optional[dict[str, int]]:
            try:
                return runtime.image_sizes()
            except EngineError:
                return None

        try:
            try:
                runtime.prefetch("sizes")
            except EngineError:
                yield lambda: None
            else:
                yield sizes
        finally:
            runtime.close()


class ImageEvents:
    """Iterates (namespace, topic, image name, labels) until cancelled; a lost daemon raises EngineError."""

    def __init__(self, call: Any, store: ContainerdStore) -> None:
        self._call = call
        self._store = store

    def cancel(self) -> None:
        self._call.cancel()

    def __iter__(self) -> Iterator[tuple[str, str, str, dict[str, str]]]:
        import grpc

        from pinctl.proto import events_pb2

        try:
            for envelope in self._call:
                event = events_pb2.ImageEvent.FromString(envelope.event.value)
                yield envelope.namespace, envelope.topic, event.name, dict(event.labels)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.CANCELLED:
                raise self._store._fail(err) from None


def _stored_image(img: Any) -> StoredImage:
    target, stamp = img.target, img.created_at
    created = stamp.seconds + stamp.nanos / 1e9 if stamp.seconds or stamp.nanos else None
    labels = img.labels  # a comprehension copies a protobuf map faster than dict() does
    return StoredImage(img.name, {key: labels[key] for key in labels},
                       Descriptor(target.media_type, target.digest, target.size), created)


def _label_update(image: StoredImage, change: LabelChange) -> Any:
    from google.protobuf import field_mask_pb2

    from pinctl.proto import descriptor_pb2, images_pb2

    # The target is sent although the mask excludes it: containerd 1.7.24 dereferences it
    # on every update and crashes the call when it is absent.
    target = descriptor_pb2.Descriptor(
        media_type=image.target.media_type, digest=image.target.digest, size=image.target.size
    )
    # A masked path whose key is absent from the labels removes that label.
    labels = {key: value for key, value in change.items() if value is not None}
    record = images_pb2.Image(name=image.name, labels=labels, target=target)
    mask = field_mask_pb2.FieldMask(paths=[f"labels.{key}" for key in sorted(change)])
    return images_pb2.UpdateImageRequest(image=record, update_mask=mask)


def _unknown_if_stalled(result: Any) -> Any:
    if isinstance(result, WriteOutcome) and result.stalled:
        # The update was sent: containerd may have applied it before it stopped answering.
        return WriteOutcome(VERDICT_FAILED, f"{result.detail}; whether the label was written is unknown", stalled=True)
    return result


def _not_tried(halt: WriteOutcome) -> WriteOutcome:
    if halt.interrupted:
        return writes.INTERRUPTED
    return writes.failed(f"not tried: {halt.detail}")


@dataclass(frozen=True)
class _SentGroup:
    """One group of guarded writes on its way: outcomes decided without a write (by the re-check),
    and the writes sent, each with the record as read and its call."""

    decided: dict[int, WriteOutcome]
    todo: list[tuple[int, StoredImage]]
    updates: list[Any]
    # Why none was sent and nothing more may be: the reads stalled, or a SIGINT came.
    halted: Optional[WriteOutcome] = None

    def cancel(self) -> bool:
        # Only when set_labels itself fails: then no outcome is reported for any of these.
        for call in self.updates:
            call.cancel()
        return True


def _update_error(err: Any, store: ContainerdStore) -> str:
    import grpc

    if err.code() == grpc.StatusCode.NOT_FOUND:
        return "image record vanished before the update (removed meanwhile?)"
    return str(store._fail(err))




def _images_stub(channel: Any) -> Any:
    from pinctl.proto import images_pb2_grpc

    return images_pb2_grpc.ImagesStub(channel)


def _images_raw_list(channel: Any) -> Any:
    """Images.List whose answer leaves each record as its bytes, decoded one at a time by the
    caller (see images_raw.proto)."""
    from pinctl.proto import images_raw_pb2

    return _images_list(channel, images_raw_pb2.ListImagesResponse.FromString)


def _images_names_list(channel: Any) -> Any:
    """Images.List read for the records' names alone (images_raw.proto)."""
    from pinctl.proto import images_raw_pb2

    return _images_list(channel, images_raw_pb2.ImageNamesResponse.FromString)


def _images_list(channel: Any, decode: Callable[[bytes], Any]) -> Any:
    from pinctl.proto import images_pb2

    return channel.unary_unary(LIST_IMAGES, request_serializer=images_pb2.ListImagesRequest.SerializeToString,
                               response_deserializer=decode)


def _content_stub(channel: Any) -> Any:
    from pinctl.proto import content_pb2_grpc

    return content_pb2_grpc.ContentStub(channel)


def _namespaces_stub(channel: Any) -> Any:
    from pinctl.proto import namespaces_pb2_grpc

    return namespaces_pb2_grpc.NamespacesStub(channel)


def _events_stub(channel: Any) -> Any:
    from pinctl.proto import events_pb2_grpc

    return events_pb2_grpc.EventsStub(channel)


def _version_stub(channel: Any) -> Any:
    from pinctl.proto import version_pb2_grpc

    return version_pb2_grpc.VersionStub(channel)


_STUB_FACTORIES: dict[str, Callable[[Any], Any]] = {
    "images": _images_stub,
    "images_raw_list": _images_raw_list,
    "images_names_list": _images_names_list,
    "content": _content_stub,
    "namespaces": _namespaces_stub,
    "version": _version_stub,
    "events": _events_stub,
}

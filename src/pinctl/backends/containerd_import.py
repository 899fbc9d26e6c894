"""Writing an image into containerd over its API, as `ctr images import` does: blobs through the
content service (streamed, each committed under the digest pinctl computed, which containerd
checks again), the GC reference labels that keep them, the layers unpacked for the CRI's
snapshotter (snapshots Prepare, diff Apply, snapshots Commit, one snapshot per chain ID), then
the image records. A lease holds everything written from the GC until the records reference it.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Protocol, Sequence

from pinctl.backends import _grpc
from pinctl.config.containerd import DEFAULT_CONFIG
from pinctl.config.files import NotRegularFile, read_regular, toml_reader
from pinctl.errors import EngineError

if TYPE_CHECKING:
    import grpc

NAMESPACE_HEADER = "containerd-namespace"
LEASE_HEADER = "containerd-lease"
GC_EXPIRE = "containerd.io/gc.expire"
# Long enough for the largest import; the lease is deleted as soon as the records exist.
LEASE_HOURS = 24
DEFAULT_SNAPSHOTTER = "overlayfs"
# How often a blob write asks whether the image filesystem still has room.
WATCH_EVERY = 64 * 1024 * 1024
# What a write's watcher answers: None to go on, or why to stop.
Watch = Callable[[int], Optional[str]]
# An image record's target: media type, digest, size.
Descriptor = tuple[str, str, int]


class BlobSource(Protocol):
    """A blob's content as the archive reader hands it over (pinctl.imports.archive.BlobStream):
    chunks that never raise, and whether they were sound once read."""

    size: int

    @property
    def digest(self) -> str:
        """The digest of what was read so far."""

    def __iter__(self) -> Iterator[bytes]:
        """The content, in chunks; a read error ends it early (verified() is then False)."""

    def verified(self) -> bool:
        """Read whole and matching the digest its name gave."""

    def stop(self, why: str) -> None:
        """Record why the write gave up (the filesystem's budget); finish() then raises it."""

    def finish(self) -> str:
        """The digest; raises the reader's refusal when the blob was not sound."""


class Unpacked(EngineError):
    """A layer did not unpack to what the image config says it is."""


class ContainerdImporter:
    """One import session on one containerd namespace: a lease, and the calls an import makes."""

    def __init__(self, address: str, namespace: str, timeout: float, write_timeout: float,
                 snapshotter: str) -> None:
        self.address = address
        self.namespace = namespace
        self.timeout = timeout
        self.write_timeout = write_timeout
        self.snapshotter = snapshotter
        self.lease = ""
        self.watch: Watch = lambda _written: None
        self.written = 0
        self._channel: Optional[grpc.Channel] = None
        self._stubs: dict[str, Any] = {}

    # -- plumbing ------------------------------------------------------------------------

    def _stub(self, name: str) -> Any:
        if name not in self._stubs:
            if self._channel is None:
                _grpc.check_socket(self.address, "containerd", "--address or CONTAINERD_ADDRESS")
                self._channel = _grpc.open_channel(self.address)
            self._stubs[name] = _factory(name)(self._channel)
        return self._stubs[name]

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        lease = ((LEASE_HEADER, self.lease),) if self.lease else ()
        return ((NAMESPACE_HEADER, self.namespace), *lease)

    def _call(self, service: str, method: str, request: Any, timeout: Optional[float] = None) -> Any:
        import grpc

        call = getattr(self._stub(service), method)
        try:
            return call(request, metadata=self._metadata(), timeout=timeout or self.timeout)
        except grpc.RpcError as err:
            raise _grpc.translate(err, "containerd", self.address, timeout or self.timeout) from None

    def __enter__(self) -> ContainerdImporter:
        from pinctl.proto import leases_pb2

        expire = (datetime.now(timezone.utc) + timedelta(hours=LEASE_HOURS)).strftime("%Y-%m-%dT%H:%M:%SZ")
        lease_id = f"pinctl-import-{uuid.uuid4().hex[:12]}"
        self._call("leases", "Create", leases_pb2.CreateRequest(id=lease_id, labels={GC_EXPIRE: expire}))
        self.lease = lease_id
        return self

    def __exit__(self, *_exc: object) -> None:
        from pinctl.proto import leases_pb2

        lease, self.lease = self.lease, ""
        try:
            if lease:
                # Unreferenced blobs (other platforms, docker save's leftovers) go with the next GC.
                self._call("leases", "Delete", leases_pb2.DeleteRequest(id=lease))
        except EngineError:
            pass  # it expires by itself (GC_EXPIRE)
        finally:
            if self._channel is not None:
                self._channel.close()
                self._channel = None
                self._stubs.clear()

    def _hold(self, kind: str, name: str) -> None:
        """Add a resource to the lease before looking it up: containerd's GC spares what a lease
        holds, and an import uses what it finds stored without writing it (which would lease it)."""
        from pinctl.proto import leases_pb2

        if self.lease:
            resource = leases_pb2.Resource(id=name, type=kind)
            self._call("leases", "AddResource", leases_pb2.AddResourceRequest(id=self.lease, resource=resource))

    # -- content (the archive reader's BlobSink) -----------------------------------------

    def has(self, digest: str, size: int) -> bool:
        """Whether the blob is stored with this size; held by the lease first, so that one found
        (an image's leftover, which nothing may reference now) stays until the records refer to it."""
        import grpc

        from pinctl.proto import content_pb2

        self._hold("content", digest)
        try:
            reply = self._stub("content").Info(content_pb2.InfoRequest(digest=digest), metadata=self._metadata(),
                                               timeout=self.timeout)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.NOT_FOUND:
                return False
            raise _grpc.translate(err, "containerd", self.address, self.timeout) from None
        return int(reply.info.size) == size

    def write(self, stream: BlobSource, labels: Optional[dict[str, str]] = None) -> None:
        """Stream one blob in; committed only when the reader vouches for it at its end."""
        import grpc

        ref = f"pinctl-{uuid.uuid4().hex}"
        try:
            for _reply in self._stub("content").Write(self._requests(stream, ref, labels or {}),
                                                      metadata=self._metadata(), timeout=self.write_timeout):
                pass
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.ALREADY_EXISTS:  # the same content is stored already
                self._abort(ref)
                if not stream.verified():
                    stream.finish()  # the reader's refusal says more than the cancelled call
                raise _grpc.translate(err, "containerd", self.address, self.write_timeout) from None
        if not stream.verified():
            self._abort(ref)
            stream.finish()

    def _requests(self, stream: BlobSource, ref: str, labels: dict[str, str]) -> Iterator[Any]:
        """Runs on gRPC's thread: it must not raise, so a refusal is left with the stream."""
        from pinctl.proto import content_pb2

        offset = 0
        checked = self.written
        for chunk in stream:
            yield content_pb2.WriteContentRequest(action=content_pb2.WRITE, ref=ref, total=stream.size,
                                                  offset=offset, data=chunk)
            offset += len(chunk)
            self.written += len(chunk)
            if self.written - checked >= WATCH_EVERY:
                checked = self.written
                why = self.watch(self.written)
                if why:
                    stream.stop(why)
                    return
        if stream.verified():
            yield content_pb2.WriteContentRequest(action=content_pb2.COMMIT, ref=ref, total=stream.size,
                                                  offset=offset, expected=stream.digest, labels=labels)

    def _abort(self, ref: str) -> None:
        from pinctl.proto import content_pb2

        try:
            self._call("content", "Abort", content_pb2.AbortRequest(ref=ref))
        except EngineError:
            pass  # nothing was left to abort

    def write_document(self, digest: str, raw: bytes, labels: dict[str, str]) -> None:
        """A document pinctl made (docker save's manifests), committed with its labels."""
        if self.has(digest, len(raw)):
            self.set_labels(digest, labels)
            return
        self.write(_Document(raw), labels)

    def read(self, digest: str, size: int, limit: int) -> Optional[bytes]:
        """A stored document (a manifest pinctl did not see in the archive); None when over limit."""
        from pinctl.proto import content_pb2

        if size > limit:
            return None
        import grpc

        try:
            stream = self._stub("content").Read(content_pb2.ReadContentRequest(digest=digest),
                                                metadata=self._metadata(), timeout=self.timeout)
            return b"".join(chunk.data for chunk in stream)
        except grpc.RpcError as err:
            raise _grpc.translate(err, "containerd", self.address, self.timeout) from None

    def set_labels(self, digest: str, labels: dict[str, str]) -> None:
        """Add labels to a stored blob, touching no other label of it."""
        self.set_labels_many([(digest, labels)])

    def set_labels_many(self, changes: Sequence[tuple[str, dict[str, str]]]) -> None:
        """Add labels to many stored blobs, each touching only its own keys, in a window of calls:
        they are independent, and the lease holds every blob until the records exist."""
        import grpc
        from google.protobuf import field_mask_pb2

        from pinctl.proto import content_pb2

        stub, metadata = self._stub("content"), self._metadata()

        def start(change: tuple[str, dict[str, str]]) -> Any:
            digest, labels = change
            mask = field_mask_pb2.FieldMask(paths=[f"labels.{key}" for key in sorted(labels)])
            request = content_pb2.UpdateRequest(info=content_pb2.Info(digest=digest, labels=labels), update_mask=mask)
            return stub.Update.future(request, metadata=metadata, timeout=self.timeout)

        for _change, call in _grpc.in_window([change for change in changes if change[1]], start):
            try:
                call.result()
            except grpc.RpcError as err:
                raise _grpc.translate(err, "containerd", self.address, self.timeout) from None

    # -- snapshots -----------------------------------------------------------------------

    def snapshot_exists(self, name: str) -> bool:
        import grpc

        from pinctl.proto import snapshots_pb2

        self._hold(f"snapshots/{self.snapshotter}", name)  # as has(): one found stays
        request = snapshots_pb2.StatSnapshotRequest(snapshotter=self.snapshotter, key=name)
        try:
            self._stub("snapshots").Stat(request, metadata=self._metadata(), timeout=self.timeout)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.NOT_FOUND:
                return False
            raise _grpc.translate(err, "containerd", self.address, self.timeout) from None
        return True

    def unpack_layer(self, layer: tuple[str, str, int], diff_id: str, chain_id: str, parent: str) -> None:
        """One layer (media type, digest, size) applied on its parent and committed as chain_id."""
        import grpc

        from pinctl.proto import descriptor_pb2, diff_pb2, snapshots_pb2

        key = f"extract-{uuid.uuid4().hex[:16]} {chain_id}"
        prepared = self._call("snapshots", "Prepare", snapshots_pb2.PrepareSnapshotRequest(
            snapshotter=self.snapshotter, key=key, parent=parent))
        try:
            media_type, digest, size = layer
            applied = self._call("diff", "Apply", diff_pb2.ApplyRequest(
                diff=descriptor_pb2.Descriptor(media_type=media_type, digest=digest, size=size),
                mounts=list(prepared.mounts)), timeout=self.write_timeout)
            if applied.applied.digest != diff_id:
                raise Unpacked(f"layer {digest} unpacks to {applied.applied.digest}, not the config's diff_id "
                               f"{diff_id}")
            try:
                self._stub("snapshots").Commit(snapshots_pb2.CommitSnapshotRequest(
                    snapshotter=self.snapshotter, name=chain_id, key=key), metadata=self._metadata(),
                    timeout=self.write_timeout)
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.ALREADY_EXISTS:  # unpacked meanwhile by another client
                    raise _grpc.translate(err, "containerd", self.address, self.write_timeout) from None
                self._remove(key)
        except BaseException:
            self._remove(key)
            raise

    def _remove(self, key: str) -> None:
        from pinctl.proto import snapshots_pb2

        try:
            self._call("snapshots", "Remove", snapshots_pb2.RemoveSnapshotRequest(snapshotter=self.snapshotter,
                                                                                   key=key))
        except EngineError:
            pass  # already gone (committed or never prepared)

    # -- image records -------------------------------------------------------------------

    def put_images(self, records: Sequence[tuple[str, Descriptor]]) -> list[bool]:
        """Create each record (name, target), or re-point an existing one (its labels stay, as ctr
        import keeps them); per record, False when it already named this target. The creates go
        in a window of calls; a name that exists is then read and updated on its own."""
        import grpc

        from pinctl.proto import descriptor_pb2, images_pb2

        stub, metadata = self._stub("images"), self._metadata()

        def start(record: tuple[str, Descriptor]) -> Any:
            name, (media_type, digest, size) = record
            target = descriptor_pb2.Descriptor(media_type=media_type, digest=digest, size=size)
            request = images_pb2.CreateImageRequest(image=images_pb2.Image(name=name, target=target))
            return stub.Create.future(request, metadata=metadata, timeout=self.timeout)

        changed = []
        for record, call in _grpc.in_window(records, start):
            try:
                call.result()
                changed.append(True)
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.ALREADY_EXISTS:
                    raise _grpc.translate(err, "containerd", self.address, self.timeout) from None
                changed.append(self._repoint(*record))
        return changed

    def _repoint(self, name: str, target: Descriptor) -> bool:
        from google.protobuf import field_mask_pb2

        from pinctl.proto import descriptor_pb2, images_pb2

        media_type, digest, size = target
        current = self._call("images", "Get", images_pb2.GetImageRequest(name=name)).image
        if current.target.digest == digest:
            return False
        image = images_pb2.Image(name=name, target=descriptor_pb2.Descriptor(media_type=media_type, digest=digest,
                                                                              size=size))
        mask = field_mask_pb2.FieldMask(paths=["target"])
        self._call("images", "Update", images_pb2.UpdateImageRequest(image=image, update_mask=mask))
        return True


def read_cri_snapshotter(config_path: Optional[str]) -> str:
    """The snapshotter the CRI unpacks images for, from containerd's config (schema 2 or 3);
    containerd's default when the file or the key is not there."""
    path = config_path or DEFAULT_CONFIG
    try:
        config = toml_reader().loads(read_regular(path).decode("utf-8"))
    except (OSError, NotRegularFile, ValueError, UnicodeDecodeError, RecursionError):
        return DEFAULT_SNAPSHOTTER
    plugins = config.get("plugins") or {}
    candidates = [
        (plugins.get("io.containerd.cri.v1.images") or {}).get("snapshotter"),
        ((plugins.get("io.containerd.grpc.v1.cri") or {}).get("containerd") or {}).get("snapshotter"),
        ((plugins.get("cri") or {}).get("containerd") or {}).get("snapshotter"),
    ]
    return next((c for c in candidates if isinstance(c, str) and c), DEFAULT_SNAPSHOTTER)


class _Document:
    """A BlobSource of bytes in memory."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.size = len(raw)

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.raw).hexdigest()

    def __iter__(self) -> Iterator[bytes]:
        yield self.raw

    def verified(self) -> bool:
        return True

    def stop(self, why: str) -> None:
        raise EngineError(why)

    def finish(self) -> str:
        return self.digest


def _factory(name: str) -> Callable[[Any], Any]:
    from pinctl.proto import content_pb2_grpc, diff_pb2_grpc, images_pb2_grpc, leases_pb2_grpc, snapshots_pb2_grpc

    return {
        "content": content_pb2_grpc.ContentStub,
        "images": images_pb2_grpc.ImagesStub,
        "leases": leases_pb2_grpc.LeasesStub,
        "snapshots": snapshots_pb2_grpc.SnapshotsStub,
        "diff": diff_pb2_grpc.DiffStub,
    }[name]

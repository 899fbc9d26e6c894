"""The CRI (runtime.v1) as the kubelet sees it: the runtime's name and version, which images it
reports pinned, and what the kubelet's image GC reads and calls: containers, the image
filesystem, RemoveImage."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Collection, Literal, Optional, Sequence

from pinctl.backends import _grpc
from pinctl.backends.registry_auth import PullCancelled, PullError, RegistryAuth, is_transient, scrub
from pinctl.errors import EngineError, EngineUnreachable

# The sockets crictl and the kubelet are usually pointed at, most common first.
# CRI-O's own default socket, where crictl looks for it.
CRIO_ENDPOINT = "unix:///run/crio/crio.sock"
KNOWN_ENDPOINTS = (
    "unix:///run/containerd/containerd.sock",
    CRIO_ENDPOINT,
    "unix:///run/cri-dockerd.sock",
    "unix:///run/k3s/containerd/containerd.sock",
)
FLAG = "--runtime-endpoint or CONTAINER_RUNTIME_ENDPOINT"
WHAT = "the CRI runtime"

# The listings a caller can start ahead (CriRuntime.prefetch): ListImages whole, ListImages read
# for sizes alone, and ListContainers.
Listing = Literal["images", "sizes", "containers"]


@dataclass(frozen=True)
class RuntimeVersion:
    name: str
    version: str
    api_version: str

    def __str__(self) -> str:
        return f"{self.name} {self.version}".strip()


@dataclass(frozen=True)
class CriImage:
    id: str
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]
    size: int
    pinned: bool


# CRI ContainerState values, as the GC model names them.
CONTAINER_STATES = {0: "created", 1: "running", 2: "exited", 3: "unknown"}


@dataclass(frozen=True)
class CriContainer:
    """A container as ListContainers and ContainerStatus show it; times in seconds since the epoch."""

    id: str
    name: str
    pod_sandbox_id: str
    image: str
    image_ref: str
    image_id: str
    state: str
    created_at: Optional[float]
    started_at: Optional[float] = None
    finished_at: Optional[float] = None
    # Images it mounts as volumes (ContainerStatus mounts with an image): the kubelet's GC
    # counts them as in use. Empty when no status was read.
    image_mounts: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImageFs:
    """One image filesystem ImageFsInfo reports: where it is mounted and what images use there."""

    mountpoint: str
    used_bytes: int


def socket_path(endpoint: str) -> str:
    if endpoint.startswith("unix://"):
        return endpoint[len("unix://") :]
    if "://" in endpoint:
        raise EngineError(f"runtime endpoint {endpoint} is not a unix socket", "give unix:///path/to/socket")
    return endpoint


class CriRuntime:
    def __init__(self, endpoint: str, timeout: float = 2.0) -> None:
        self.endpoint = endpoint if "://" in endpoint else f"unix://{endpoint}"
        self.path = socket_path(endpoint)
        self.timeout = timeout
        self._channel: Any = None
        # Listings started ahead (prefetch), by name, until their answer is taken.
        self._started: dict[Listing, Any] = {}

    def _open(self) -> Any:
        if self._channel is None:
            _grpc.check_socket(self.path, WHAT, FLAG)
            self._channel = _grpc.open_channel(self.path)
        return self._channel

    def close(self) -> None:
        """Release the channel; the next call opens a new one."""
        self._started.clear()
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def _call(self, stub_name: str, method: str, request: Any) -> Any:
        import grpc

        stub = _stub(self._open(), stub_name)
        try:
            return getattr(stub, method)(request, timeout=self.timeout)
        except grpc.RpcError as err:
            raise _grpc.translate(err, WHAT, self.endpoint, self.timeout, api="the CRI (runtime.v1)", flag=FLAG) from None

    def prefetch(self, *listings: Listing) -> None:
        """Start these listings now, for a caller with other work to do first: the runtime answers
        meanwhile, and the next list_images, image_sizes or list_containers takes that answer (as
        of now) instead of asking again. A failure shows when the answer is taken. An earlier one
        nobody took (its caller failed first) is dropped: an answer is never older than its ask."""
        for name in listings:
            stale = self._started.pop(name, None)
            if stale is not None:
                stale.cancel()
            self._started[name] = _grpc.start_listing(self._starter(name), self.timeout)

    def _starter(self, name: Listing) -> Callable[[float], Any]:
        from pinctl.proto import cri_pb2

        channel = self._open()
        if name == "sizes":
            from pinctl.proto import cri_raw_pb2

            # Another answer type for the same method: the two fields sizes need, decoded alone.
            call: Any = channel.unary_unary(
                "/runtime.v1.ImageService/ListImages", request_serializer=cri_pb2.ListImagesRequest.SerializeToString,
                response_deserializer=cri_raw_pb2.ImageSizesResponse.FromString)
            request: Any = cri_pb2.ListImagesRequest()
        elif name == "images":
            call, request = _stub(channel, "ImageServiceStub").ListImages, cri_pb2.ListImagesRequest()
        else:
            call, request = _stub(channel, "RuntimeServiceStub").ListContainers, cri_pb2.ListContainersRequest()
        return lambda deadline: call.future(request, timeout=deadline)

    def _listing(self, name: Listing) -> Any:
        """A call whose answer grows with the node (or its prefetched answer), awaited while the
        runtime answers Version."""
        from pinctl.proto import cri_pb2

        runtime = _stub(self._open(), "RuntimeServiceStub")

        def probe() -> Any:
            return runtime.Version.future(cri_pb2.VersionRequest(version="v1"), timeout=self.timeout)

        def fail(err: Any, waited: float) -> EngineError:
            return _grpc.translate(err, WHAT, self.endpoint, waited, api="the CRI (runtime.v1)", flag=FLAG)

        return _grpc.listing(self._starter(name), probe, self.timeout, fail, self._started.pop(name, None))

    def version(self) -> RuntimeVersion:
        from pinctl.proto import cri_pb2

        reply = self._call("RuntimeServiceStub", "Version", cri_pb2.VersionRequest(version="v1"))
        return RuntimeVersion(reply.runtime_name, reply.runtime_version, reply.runtime_api_version)

    def list_images(self) -> list[CriImage]:
        return [_image(img) for img in self._listing("images").images]

    def image_sizes(self) -> dict[str, int]:
        """Each image's size by its ID, from one ListImages read for those two fields alone: the
        figure the kubelet's image GC counts (80 ms at 10,000 images, two thirds of list_images')."""
        return {image.id: image.size for image in self._listing("sizes").images}

    def image_status(self, ref: str) -> Optional[CriImage]:
        from pinctl.proto import cri_pb2

        request = cri_pb2.ImageStatusRequest(image=cri_pb2.ImageSpec(image=ref))
        reply = self._call("ImageServiceStub", "ImageStatus", request)
        return _image(reply.image) if reply.HasField("image") and reply.image.id else None

    def list_containers(self, statuses: bool = True, *, skip_status: Collection[str] = ()) -> list[CriContainer]:
        """Every container in any state: what the kubelet's image GC counts as users of an image.
        With statuses, also their start and finish times and image mounts (one status call each,
        all in flight), except for the containers in skip_status (already known to the caller)."""
        listed = self._listing("containers").containers
        wanted = [item.id for item in listed if item.id not in skip_status]
        found = self._container_statuses(wanted) if statuses else {}
        return [_container(item, found.get(item.id)) for item in listed]

    def _container_statuses(self, ids: Sequence[str]) -> dict[str, Any]:
        import grpc

        from pinctl.proto import cri_pb2

        stub = _stub(self._open(), "RuntimeServiceStub")

        def start(cid: str) -> Any:
            return stub.ContainerStatus.future(cri_pb2.ContainerStatusRequest(container_id=cid), timeout=self.timeout)

        found: dict[str, Any] = {}
        for cid, future in _grpc.in_window(ids, start):
            try:
                found[cid] = future.result().status
            except grpc.RpcError:
                continue  # removed since the list: it protects nothing any more
        return found

    def image_fs_info(self) -> list[ImageFs]:
        from pinctl.proto import cri_pb2

        reply = self._call("ImageServiceStub", "ImageFsInfo", cri_pb2.ImageFsInfoRequest())
        return [ImageFs(fs.fs_id.mountpoint, int(fs.used_bytes.value)) for fs in reply.image_filesystems]

    def pull_image(self, ref: str, auth: Optional[RegistryAuth], timeout: float,
                   cancelled: Optional[Callable[[], bool]] = None) -> str:
        """Pull through the runtime (its mirrors, hosts.toml and credentials apply), bounded by its
        own timeout; returns the image reference the runtime reports. With cancelled, the call is
        abandoned (and the runtime told) as soon as it turns true."""
        import grpc

        from pinctl.proto import cri_pb2

        request = cri_pb2.PullImageRequest(image=cri_pb2.ImageSpec(image=ref))
        if auth is not None:
            # No server_address: containerd parses it as a URL and rejects a bare host:port; the
            # credentials are only ever sent with pulls from their own registry anyway.
            request.auth.CopyFrom(cri_pb2.AuthConfig(username=auth.username, password=auth.password,
                                                     auth=auth.auth, identity_token=auth.identity_token))
        call = _stub(self._open(), "ImageServiceStub").PullImage.future(request, timeout=timeout)
        finished = threading.Event()
        call.add_done_callback(lambda _call: finished.set())
        try:
            while not finished.wait(0.2):
                if cancelled is not None and cancelled():
                    call.cancel()
                    raise PullCancelled(ref)
            return str(call.result().image_ref)
        except grpc.RpcError as err:
            raise _pull_error(err, self.endpoint, timeout, auth) from None

    def remove_image(self, image: str) -> None:
        """Delete an image by ID or reference, as the kubelet's GC does. The CRI deletes it even
        when a container uses it or it is pinned: callers check that first."""
        from pinctl.proto import cri_pb2

        self._call("ImageServiceStub", "RemoveImage", cri_pb2.RemoveImageRequest(image=cri_pb2.ImageSpec(image=image)))


def _pull_error(err: Any, endpoint: str, timeout: float, auth: Optional[RegistryAuth]) -> EngineError:
    """The runtime's own words (they name the registry's answer), with any secret scrubbed; a
    transient failure is marked so the caller can retry it."""
    import grpc

    code = err.code()
    details = scrub((err.details() or "").strip(), auth)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return PullError(f"no pull within {timeout:g}s", "raise --timeout for large images or slow registries",
                         transient=False)
    if code == grpc.StatusCode.UNAVAILABLE and "connect" in details and endpoint in details:
        return EngineUnreachable(f"{WHAT} at {endpoint} is not answering", "is it running?")
    return PullError(details or code.name.lower(), transient=is_transient(code.name, details))


def _stub(channel: Any, name: str) -> Any:
    from pinctl.proto import cri_pb2_grpc

    return getattr(cri_pb2_grpc, name)(channel)


def _seconds(nanoseconds: int) -> Optional[float]:
    return nanoseconds / 1e9 if nanoseconds > 0 else None


def _container(item: Any, status: Any) -> CriContainer:
    started = _seconds(int(status.started_at)) if status is not None else None
    finished = _seconds(int(status.finished_at)) if status is not None else None
    return CriContainer(
        id=item.id,
        name=item.metadata.name,
        pod_sandbox_id=item.pod_sandbox_id,
        image=item.image.image,
        image_ref=item.image_ref,
        image_id=item.image_id,
        state=CONTAINER_STATES.get(int(item.state), "unknown"),
        created_at=_seconds(int(item.created_at)),
        started_at=started,
        finished_at=finished,
        image_mounts=_image_mounts(status),
    )


def _image_mounts(status: Any) -> tuple[str, ...]:
    if status is None:
        return ()
    return tuple(dict.fromkeys(m.image.image for m in status.mounts if m.HasField("image") and m.image.image))


def _image(img: Any) -> CriImage:
    return CriImage(img.id, tuple(img.repo_tags), tuple(img.repo_digests), int(img.size), bool(img.pinned))


def discover(candidates: Sequence[str], timeout: float, warn: Callable[[str], None]) -> tuple[CriRuntime, RuntimeVersion]:
    """The first endpoint that answers the CRI Version call, named in a warning as crictl does."""
    tried: list[str] = []
    for endpoint in candidates:
        runtime = CriRuntime(endpoint, timeout)
        try:
            version = runtime.version()
        except EngineError as err:
            tried.append(f"{runtime.path} ({'no socket' if 'does not exist' in err.message else err.message})")
            continue
        warn(f"no runtime endpoint set; using {runtime.endpoint} ({version}): set {FLAG} to choose")
        return runtime, version
    raise EngineUnreachable("no CRI runtime answers: " + ", ".join(tried), f"set {FLAG}")

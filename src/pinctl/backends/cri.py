"""The CRI (runtime.v1) as the kubelet sees it: the runtime's name and version, and which images it reports pinned."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from pinctl.backends import _grpc
from pinctl.errors import EngineError, EngineUnreachable

# The sockets crictl and the kubelet are usually pointed at, most common first.
KNOWN_ENDPOINTS = (
    "unix:///run/containerd/containerd.sock",
    "unix:///run/crio/crio.sock",
    "unix:///run/cri-dockerd.sock",
    "unix:///run/k3s/containerd/containerd.sock",
)
FLAG = "--runtime-endpoint or CONTAINER_RUNTIME_ENDPOINT"
WHAT = "the CRI runtime"


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

    def _call(self, stub_name: str, method: str, request: Any) -> Any:
        import grpc

        from pinctl.proto import cri_pb2_grpc

        if self._channel is None:
            _grpc.check_socket(self.path, WHAT, FLAG)
            self._channel = _grpc.open_channel(self.path)
        stub = getattr(cri_pb2_grpc, stub_name)(self._channel)
        try:
            return getattr(stub, method)(request, timeout=self.timeout)
        except grpc.RpcError as err:
            raise _grpc.translate(err, WHAT, self.endpoint, self.timeout, api="the CRI (runtime.v1)") from None

    def version(self) -> RuntimeVersion:
        from pinctl.proto import cri_pb2

        reply = self._call("RuntimeServiceStub", "Version", cri_pb2.VersionRequest(version="v1"))
        return RuntimeVersion(reply.runtime_name, reply.runtime_version, reply.runtime_api_version)

    def list_images(self) -> list[CriImage]:
        from pinctl.proto import cri_pb2

        reply = self._call("ImageServiceStub", "ListImages", cri_pb2.ListImagesRequest())
        return [_image(img) for img in reply.images]

    def image_status(self, ref: str) -> Optional[CriImage]:
        from pinctl.proto import cri_pb2

        request = cri_pb2.ImageStatusRequest(image=cri_pb2.ImageSpec(image=ref))
        reply = self._call("ImageServiceStub", "ImageStatus", request)
        return _image(reply.image) if reply.HasField("image") and reply.image.id else None


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

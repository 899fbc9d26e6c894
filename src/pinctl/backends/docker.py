"""Docker through its API: images, their config labels, containers, and which image store it uses.

The calls that answer at once (info, the image and container lists, inspect, delete) go over
dockerd's socket with the standard library's socket alone (`_Wire`): the docker SDK's import
(requests, urllib3) took longer than `docker images` does from start to end. Pull, load and the
event stream, long calls that stream, keep the SDK.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from pinctl.backends import procfs
from pinctl.backends._grpc import check_socket
from pinctl.backends.registry_auth import PullCancelled, PullError, RegistryAuth, is_transient, scrub
from pinctl.errors import EngineError, EngineUnreachable, UsageError

DEFAULT_HOST = "unix:///var/run/docker.sock"
CONTAINERD_SNAPSHOTTER = "io.containerd.snapshotter.v1"
FLAG = "--docker-host or DOCKER_HOST"


@dataclass(frozen=True)
class DockerImage:
    image_id: str
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]
    size: int
    labels: dict[str, str] = field(default_factory=dict)
    created: Optional[float] = None


@dataclass(frozen=True)
class DockerContainer:
    """A container in any state, and the image it was created from."""

    id: str
    name: str
    image: str
    image_id: str
    state: str
    created: Optional[float]


@dataclass(frozen=True)
class ImageStoreKind:
    """Which store Docker keeps images in: its containerd store (labels possible) or a classic graph driver."""

    driver: str
    containerd: bool


class DockerEngine:
    def __init__(self, host: Optional[str] = None, timeout: float = 2.0) -> None:
        self.host = host or DEFAULT_HOST
        self.timeout = timeout
        self._client: Any = None
        self._wire: Optional[_Wire] = None

    def _api(self) -> Any:
        """The docker SDK's client, for the calls that stream (pull, load, events)."""
        if self._client is None:
            self._check_socket()
            import docker

            try:
                self._client = docker.APIClient(base_url=self.host, timeout=self.timeout, version="auto")
            except docker.errors.DockerException as err:
                raise self._fail(err) from None
        return self._client

    def _check_socket(self) -> None:
        if self.host.startswith("unix://"):
            check_socket(self.host[len("unix://") :], "Docker", FLAG)

    def _fail(self, err: Exception) -> EngineError:
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        if isinstance(err, TimeoutError) or "timed out" in text.lower() or "timeout" in text.lower():
            return EngineUnreachable(f"Docker at {self.host} did not answer within {self.timeout:g}s",
                                     "is dockerd running? raise --timeout if it is slow")
        if isinstance(err, ConnectionError) or "connection" in text.lower():
            return EngineUnreachable(f"Docker at {self.host} is not answering ({text})", "is dockerd running?")
        return EngineError(f"Docker at {self.host}: {text}")

    def _get(self, path: str, method: str = "GET", absent_ok: bool = False) -> Any:
        """dockerd's JSON answer to one call; its refusal as an EngineError. absent_ok: None for
        a 404 (no such image)."""
        if self._wire is None:
            self._check_socket()
            self._wire = _Wire.to(self.host, self.timeout)
        try:
            status, body = self._wire.exchange(method, path)
        except OSError as err:
            raise self._fail(err) from None
        except ValueError as err:
            raise EngineError(f"Docker at {self.host} answered {path} with {err}") from None
        if status == 404 and absent_ok:
            return None
        if status >= 400:
            raise EngineError(f"Docker at {self.host}: {_refusal_text(status, body)}")
        try:
            return json.loads(body) if body else None
        except ValueError:
            raise EngineError(f"Docker at {self.host} answered {path} with what is not JSON") from None

    def close(self) -> None:
        self._wire = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def image_store(self) -> ImageStoreKind:
        info = self._get("/info")
        status = {str(k): str(v) for k, v in info.get("DriverStatus") or []}
        return ImageStoreKind(driver=str(info.get("Driver", "")),
                              containerd=status.get("driver-type") == CONTAINERD_SNAPSHOTTER)

    def list_images(self) -> list[DockerImage]:
        return [_docker_image(raw) for raw in self._get("/images/json") or ()]

    def list_containers(self) -> list[DockerContainer]:
        """Every container, in any state: each keeps its image from `docker image prune`, too."""
        return [_docker_container(raw) for raw in self._get("/containers/json?all=1") or ()]

    def root_dir(self) -> str:
        """Where Docker keeps its data: its images' filesystem."""
        return str(self._get("/info").get("DockerRootDir", ""))

    def root_dir_here(self) -> str:
        """Docker's data root reached from here: through dockerd's /proc/PID/root when it runs in
        a mount namespace of its own (a unit's private mounts), as the CRI's image filesystem is."""
        return procfs.as_served(self.host, self.root_dir())

    def image_present(self, ref: str) -> Optional[str]:
        """The ID of the image ref names, or None when Docker has no such image."""
        raw = self._inspect(ref)
        return None if raw is None else str(raw.get("Id", "")) or None

    def _inspect(self, ref: str) -> Optional[dict[str, Any]]:
        from urllib.parse import quote

        return self._get(f"/images/{quote(ref, safe='/:')}/json", absent_ok=True)

    def pull_image(self, ref: str, auth: Optional[RegistryAuth], timeout: float,
                   cancelled: Optional[Callable[[], bool]] = None) -> str:
        """Pull through dockerd (its mirrors and insecure-registries apply), on a connection of its
        own whose reads wait up to timeout; the whole pull is bounded by timeout too. Returns the
        image's ID."""
        import docker
        import requests

        repository, tag = _split_for_pull(ref)
        credentials = {"username": auth.username, "password": auth.password} if auth is not None else None
        client = docker.APIClient(base_url=self.host, timeout=timeout, version="auto")
        deadline = time.monotonic() + timeout
        try:
            for event in client.pull(repository, tag=tag, stream=True, decode=True, auth_config=credentials):
                if "error" in event:
                    text = scrub(str(event.get("error")), auth)
                    raise PullError(text, transient=is_transient("", text))
                if (cancelled is not None and cancelled()) or time.monotonic() > deadline:
                    break
            if cancelled is not None and cancelled():
                raise PullCancelled(ref)
            if time.monotonic() > deadline:
                raise PullError(f"no pull within {timeout:g}s", "raise --timeout for large images or slow registries")
        except (docker.errors.DockerException, requests.RequestException) as err:
            text = scrub(str(err).splitlines()[0] if str(err) else type(err).__name__, auth)
            raise PullError(f"Docker at {self.host}: {text}", transient=is_transient("", text)) from None
        finally:
            client.close()
        return self.image_present(ref) or ref

    def load_archive(self, source: Any, timeout: float) -> list[str]:
        """`docker load` of an open archive file, streamed (the SDK sends the file as it reads
        it), on a connection of its own whose reads wait up to timeout. The names Docker says it
        loaded; its error as an EngineError."""
        import docker
        import requests

        client = docker.APIClient(base_url=self.host, timeout=timeout, version="auto")
        names: list[str] = []
        try:
            for event in client.load_image(source):
                if "error" in event or ("message" in event and "stream" not in event):
                    why = event.get("error") or event.get("message")
                    raise EngineError(f"Docker at {self.host} refused the archive: {why}")
                text = str(event.get("stream", "")).strip()
                if text.startswith("Loaded image"):
                    names.append(text.split(":", 1)[1].strip())
        except (docker.errors.DockerException, requests.RequestException) as err:
            raise self._fail(err) from None
        finally:
            client.close()
        return names

    def image(self, ref: str) -> Optional[DockerImage]:
        """One image as Docker has it now (by ID or name); None when Docker has no such image."""
        raw = self._inspect(ref)
        if raw is None:
            return None
        config = raw.get("Config") or {}
        return _docker_image({**raw, "Labels": config.get("Labels"), "Created": None})

    def subscribe_images(self) -> DockerImageEvents:
        """Docker's image events (its own store's: untag, delete, tag, pull, load) until cancelled.
        Its untag and delete events name the image ID alone (moby's image_delete.go logs the ID as
        the name), so a reader asks the image afterwards which names it still has."""
        api = self._api()
        import docker
        import requests

        try:
            # The SDK reads the event stream with no timeout of its own: it stays open while dockerd runs.
            stream = api.events(decode=True, filters={"type": ["image"]})
        except (docker.errors.DockerException, requests.RequestException) as err:
            raise self._fail(err) from None
        return DockerImageEvents(stream, self)

    def remove_image(self, image_id: str) -> None:
        """Delete an image with all its tags (`docker rmi -f ID`). Docker still refuses one a running
        container uses; callers check for containers in any state just before."""
        from urllib.parse import quote

        self._get(f"/images/{quote(image_id, safe='/:')}?force=1", method="DELETE")


class DockerImageEvents:
    """Iterates (action, image ID) of Docker's image events until cancelled; a lost dockerd raises EngineError."""

    def __init__(self, stream: Any, engine: DockerEngine) -> None:
        self._stream = stream
        self._engine = engine
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True
        try:
            self._stream.close()
        except Exception:  # noqa: BLE001 - closing a stream that already broke
            pass

    def __iter__(self) -> Iterator[tuple[str, str]]:
        import docker
        import requests

        try:
            for event in self._stream:
                if not isinstance(event, dict) or event.get("Type") != "image":
                    continue
                actor = event.get("Actor") or {}
                yield str(event.get("Action", "")), str(actor.get("ID", ""))
        except (docker.errors.DockerException, requests.RequestException, OSError, ValueError) as err:
            if not self._cancelled:
                raise self._engine._fail(err) from None


@dataclass(frozen=True)
class _Wire:
    """One HTTP/1.0 exchange per call with dockerd, read to its end. HTTP/1.0 because dockerd
    (Go's net/http) then sends the answer whole and closes: no chunks to decode, no connection to
    keep. A new connection per call costs less than the import of a client library would."""

    family: int
    address: Any
    timeout: float

    @classmethod
    def to(cls, host: str, timeout: float) -> _Wire:
        scheme, _, rest = host.partition("://")
        if scheme == "unix" and rest:
            return cls(socket.AF_UNIX, rest, timeout)
        if scheme in ("tcp", "http") and rest:
            from urllib.parse import urlsplit

            try:
                parts = urlsplit(f"//{rest}")
                return cls(socket.AF_INET, (parts.hostname or "localhost", parts.port or 2375), timeout)
            except ValueError:
                pass
        raise UsageError(f"Docker host {host}: pinctl reaches Docker at unix://PATH or tcp://HOST:PORT only",
                         f"point {FLAG} at dockerd's socket, as {DEFAULT_HOST}")

    def exchange(self, method: str, path: str) -> tuple[int, bytes]:
        """Status and body of dockerd's answer; socket errors (TimeoutError: no answer within
        timeout, each read) as OSError, an answer that is no HTTP as ValueError."""
        if self.family == socket.AF_UNIX:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.settimeout(self.timeout)
            try:
                conn.connect(self.address)
            except OSError:
                conn.close()
                raise
        else:
            conn = socket.create_connection(self.address, self.timeout)
        with conn:
            conn.sendall(f"{method} {path} HTTP/1.0\r\nHost: docker\r\nUser-Agent: pinctl\r\n\r\n".encode())
            chunks = []
            while chunk := conn.recv(1 << 18):
                chunks.append(chunk)
        return parse_answer(b"".join(chunks))


def parse_answer(data: bytes) -> tuple[int, bytes]:
    """Status and body of an HTTP answer read to its end; ValueError when it is none, or cut short."""
    head, found, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = lines[0].split(None, 2)
    if not found or len(status) < 2 or not status[0].startswith(b"HTTP/") or not status[1].isdigit():
        raise ValueError("what is not HTTP" if data else "nothing (the connection closed)")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = _unchunk(body)
    elif b"content-length" in headers:
        length = int(headers[b"content-length"])
        if len(body) < length:
            raise ValueError(f"an answer cut short ({len(body)} of {length} bytes)")
        body = body[:length]
    return int(status[1]), body


def _unchunk(body: bytes) -> bytes:
    parts: list[bytes] = []
    at = 0
    while True:
        end = body.find(b"\r\n", at)
        if end < 0:
            raise ValueError("an answer cut short (chunked)")
        size = int(body[at:end].split(b";")[0], 16)
        if size == 0:
            return b"".join(parts)
        if len(body) < end + 2 + size:
            raise ValueError("an answer cut short (chunked)")
        parts.append(body[end + 2:end + 2 + size])
        at = end + 2 + size + 2


def _refusal_text(status: int, body: bytes) -> str:
    """dockerd's own words for a refusal ({"message": ...}), with the HTTP status."""
    try:
        message = str(json.loads(body).get("message") or "")
    except (ValueError, AttributeError):
        message = body.decode("utf-8", "replace").strip()
    message = message.splitlines()[0] if message else "no reason given"
    return f"{message} (HTTP {status})"


def _split_for_pull(ref: str) -> tuple[str, Optional[str]]:
    """repository and tag (or digest) as Docker's pull API takes them."""
    if "@" in ref:
        repository, digest = ref.split("@", 1)
        return repository.rsplit(":", 1)[0] if ":" in repository.rsplit("/", 1)[-1] else repository, digest
    repository, _, tag = ref.rpartition(":")
    return (repository, tag) if repository and "/" not in tag else (ref, None)


def _docker_container(raw: dict[str, Any]) -> DockerContainer:
    names = [str(n).lstrip("/") for n in raw.get("Names") or ()]
    created = raw.get("Created")
    return DockerContainer(
        id=str(raw.get("Id", "")),
        name=names[0] if names else "",
        image=str(raw.get("Image", "")),
        image_id=str(raw.get("ImageID", "")),
        state=str(raw.get("State", "unknown")),
        created=float(created) if isinstance(created, (int, float)) else None,
    )


def _docker_image(raw: dict[str, Any]) -> DockerImage:
    tags = tuple(t for t in raw.get("RepoTags") or () if t != "<none>:<none>")
    digests = tuple(d for d in raw.get("RepoDigests") or () if not d.startswith("<none>@"))
    return DockerImage(
        image_id=str(raw.get("Id", "")),
        repo_tags=tags,
        repo_digests=digests,
        size=int(raw.get("Size") or 0),
        labels={str(k): str(v) for k, v in (raw.get("Labels") or {}).items()},
        created=float(raw["Created"]) if isinstance(raw.get("Created"), (int, float)) else None,
    )

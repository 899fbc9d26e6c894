"""Docker through its API (the docker SDK): images, their config labels, and which image store it uses."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from pinctl.backends import procfs
from pinctl.backends._grpc import check_socket
from pinctl.backends.registry_auth import PullCancelled, PullError, RegistryAuth, is_transient, scrub
from pinctl.errors import EngineError, EngineUnreachable

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

    def _api(self) -> Any:
        if self._client is None:
            if self.host.startswith("unix://"):
                check_socket(self.host[len("unix://") :], "Docker", FLAG)
            import docker

            try:
                self._client = docker.APIClient(base_url=self.host, timeout=self.timeout, version="auto")
            except docker.errors.DockerException as err:
                raise self._fail(err) from None
        return self._client

    def _fail(self, err: Exception) -> EngineError:
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        if "timed out" in text.lower() or "timeout" in text.lower():
            return EngineUnreachable(f"Docker at {self.host} did not answer within {self.timeout:g}s",
                                     "is dockerd running? raise --timeout if it is slow")
        if "connection" in text.lower():
            return EngineUnreachable(f"Docker at {self.host} is not answering ({text})", "is dockerd running?")
        return EngineError(f"Docker at {self.host}: {text}")

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        # The socket is checked first: with no Docker on the node (the usual case for ls) the
        # Docker library, some 0.2 s to import, is never loaded.
        api = self._api()
        import docker
        import requests

        try:
            return getattr(api, method)(*args, **kwargs)
        except (docker.errors.DockerException, requests.RequestException) as err:
            raise self._fail(err) from None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def image_store(self) -> ImageStoreKind:
        info = self._call("info")
        status = {str(k): str(v) for k, v in info.get("DriverStatus") or []}
        return ImageStoreKind(driver=str(info.get("Driver", "")),
                              containerd=status.get("driver-type") == CONTAINERD_SNAPSHOTTER)

    def list_images(self) -> list[DockerImage]:
        return [_docker_image(raw) for raw in self._call("images")]

    def list_containers(self) -> list[DockerContainer]:
        """Every container, in any state: each keeps its image from `docker image prune`, too."""
        return [_docker_container(raw) for raw in self._call("containers", all=True)]

    def root_dir(self) -> str:
        """Where Docker keeps its data: its images' filesystem."""
        return str(self._call("info").get("DockerRootDir", ""))

    def root_dir_here(self) -> str:
        """Docker's data root reached from here: through dockerd's /proc/PID/root when it runs in
        a mount namespace of its own (a unit's private mounts), as the CRI's image filesystem is."""
        return procfs.as_served(self.host, self.root_dir())

    def image_present(self, ref: str) -> Optional[str]:
        """The ID of the image ref names, or None when Docker has no such image."""
        import docker

        try:
            return str(self._api().inspect_image(ref).get("Id", "")) or None
        except docker.errors.NotFound:
            return None
        except docker.errors.DockerException as err:
            raise self._fail(err) from None

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
        import docker

        try:
            raw = self._api().inspect_image(ref)
        except docker.errors.NotFound:
            return None
        except docker.errors.DockerException as err:
            raise self._fail(err) from None
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
        self._call("remove_image", image_id, force=True)


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

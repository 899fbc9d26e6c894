"""The Kubernetes API, through lightkube: what fleet status reads and what an agent writes.

lightkube (and httpx below it) loads only when a command that calls the API runs: `pinctl ls`
and `--help` never pay for it. Why lightkube and not the official client or kr8s:
docs/fleet-status.md, "Why lightkube".

Credentials are found as kubectl finds them for an operator (--kubeconfig, then every file of
KUBECONFIG, then ~/.kube/config), and in-cluster first for an agent (the pod's projected token,
re-read by lightkube when the API server refuses a rotated one).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Iterator, Optional, cast

from pinctl.errors import PinctlError, UsageError

if TYPE_CHECKING:
    from lightkube import Client

IN_CLUSTER_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
FIELD_MANAGER = "pinctl"
# The API server answers a list of 10,000 Nodes in pieces of this many.
LIST_CHUNK = 500
TIMEOUT_S = 20.0


class KubeApiError(PinctlError):
    """The Kubernetes API refused a request or did not answer."""


class KubeForbidden(KubeApiError):
    """The API server refused the credentials (401) or the request (403: RBAC, an admission policy)."""


class KubeNotFound(KubeApiError):
    """The object asked for does not exist."""


class KubeApi:
    """One connection to one API server. Objects come back as the API's JSON (dicts): the
    callers read a few fields of each, and 10,000 Nodes parsed into models cost more."""

    def __init__(self, client: Client, where: str) -> None:
        self.client = client
        self.where = where

    @classmethod
    def for_operator(cls, kubeconfig: Optional[str] = None, context: Optional[str] = None) -> KubeApi:
        """As kubectl: --kubeconfig, else KUBECONFIG's files merged (the first to set a key wins),
        else ~/.kube/config, else the pod's in-cluster account."""
        from lightkube import Client

        config = _operator_config(kubeconfig)
        try:
            single = config.get(context_name=context)
        except Exception as err:  # noqa: BLE001 - lightkube raises its ConfigError or KeyError
            raise UsageError(f"kubeconfig: {_said(err)}", "name a context of `kubectl config get-contexts`") from None
        if single is None:
            raise UsageError("kubeconfig has no current context", "give --context or set one with kubectl config use-context")
        server = single.cluster.server if single.cluster else "?"
        return cls(_call(lambda: Client(config=single, field_manager=FIELD_MANAGER, timeout=_timeout()), server), server)

    @classmethod
    def for_agent(cls, account_dir: str = IN_CLUSTER_DIR) -> KubeApi:
        """In-cluster (the projected token the node-status component mounts), else as kubectl."""
        if not os.path.exists(os.path.join(account_dir, "token")):
            try:
                return cls.for_operator()
            except UsageError as err:
                raise UsageError(f"--node-status: no credentials for the Kubernetes API: no token in {account_dir}, "
                                 f"and {err.message}", "deploy with deploy/kubernetes/components/node-status, "
                                 "or set KUBECONFIG") from None
        from lightkube import Client
        from lightkube.config.kubeconfig import KubeConfig

        config = _call(lambda: KubeConfig.from_service_account(service_account=account_dir), account_dir)
        single = config.get()
        server = single.cluster.server if single and single.cluster else "?"
        return cls(_call(lambda: Client(config=single, field_manager=FIELD_MANAGER, timeout=_timeout()), server), server)

    # -- reads ----------------------------------------------------------------------------

    def nodes(self, selector: str = "") -> list[dict[str, Any]]:
        from lightkube.resources.core_v1 import Node

        labels = parse_selector(selector) if selector else None
        return [_slim(node) for node in self._iterate(lambda: self.client.list(Node, labels=labels,
                                                                               chunk_size=LIST_CHUNK))]

    def configmap_data(self, namespace: str, name: str) -> dict[str, str]:
        from lightkube.resources.core_v1 import ConfigMap

        found = self._call(lambda: self.client.get(ConfigMap, name, namespace=namespace), f"configmap {namespace}/{name}")
        return dict(found.data or {})

    # -- writes (an agent's own Node) -------------------------------------------------------

    def patch_node_status(self, node: str, patch: dict[str, Any]) -> None:
        from lightkube.resources.core_v1 import Node
        from lightkube.types import PatchType

        self._call(lambda: self.client.patch(Node.Status, node, patch, patch_type=PatchType.STRATEGIC),
                   f"node {node}'s status")

    def create_event(self, namespace: str, body: dict[str, Any]) -> str:
        from lightkube.resources.core_v1 import Event

        event = cast(Event, Event.from_dict(body))
        made = self._call(lambda: self.client.create(event, namespace=namespace), "an event")
        return str(made.metadata.name) if made.metadata else ""

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        from lightkube.resources.core_v1 import Event
        from lightkube.types import PatchType

        self._call(lambda: self.client.patch(Event, name, patch, namespace=namespace, patch_type=PatchType.MERGE),
                   f"event {name}")

    def close(self) -> None:
        self.client.close()

    # -- errors --------------------------------------------------------------------------------

    def _iterate(self, listing: Any) -> Iterator[Any]:
        """The items of a paged list, each page's request under _call's error mapping."""
        iterator = self._call(lambda: iter(listing()), "nodes")
        while (item := self._call(lambda: next(iterator, None), "nodes")) is not None:
            yield item

    def _call(self, request: Any, what: str) -> Any:
        return _call(request, self.where, what)


def _timeout() -> Any:
    import httpx2

    return httpx2.Timeout(TIMEOUT_S)


def _call(request: Any, where: str, what: str = "") -> Any:
    import httpx2
    from lightkube import ApiError, ConfigError

    about = f" ({what})" if what else ""
    try:
        return request()
    except ApiError as err:
        code = err.status.code or 0
        text = _said(err.status.message or err)
        if code in (401, 403):
            raise KubeForbidden(f"the API server at {where} refused{about}: {text}",
                                "check the credentials and what they are allowed") from None
        if code == 404:
            raise KubeNotFound(f"not found{about}: {text}") from None
        raise KubeApiError(f"the API server at {where} answered {code}{about}: {text}") from None
    except ConfigError as err:
        raise UsageError(f"kubeconfig: {_said(err)}", "check --kubeconfig, KUBECONFIG or ~/.kube/config") from None
    except httpx2.HTTPError as err:
        raise KubeApiError(f"no answer from the API server at {where}{about}: {_said(err)}",
                           "check the server address, --context and the network") from None
    except OSError as err:
        raise KubeApiError(f"cannot reach the API server at {where}{about}: {_said(err)}") from None


def _operator_config(kubeconfig: Optional[str]) -> Any:
    from lightkube.config.kubeconfig import KubeConfig

    if kubeconfig:
        paths = [kubeconfig]
    elif os.environ.get("KUBECONFIG"):
        paths = [path for path in os.environ["KUBECONFIG"].split(os.pathsep) if path]
    else:
        paths = [os.path.expanduser("~/.kube/config")]
    existing = [path for path in paths if os.path.exists(path)]
    if not existing:
        if not kubeconfig and os.path.exists(os.path.join(IN_CLUSTER_DIR, "token")):
            return _call(lambda: KubeConfig.from_service_account(), IN_CLUSTER_DIR)
        raise UsageError(f"no kubeconfig at {', '.join(paths)}", "give --kubeconfig FILE or set KUBECONFIG")
    return KubeConfig.from_dict(_merged(existing))


def _merged(paths: list[str]) -> dict[str, Any]:
    """KUBECONFIG's files as kubectl merges them: the first file to name a cluster, user or context
    (or to set current-context) wins; relative paths in a file are relative to that file."""
    import yaml

    merged: dict[str, Any] = {"clusters": [], "users": [], "contexts": []}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                loaded = yaml.safe_load(handle) or {}
        except (OSError, yaml.YAMLError) as err:
            raise UsageError(f"kubeconfig {path}: {_said(err)}", "fix or remove the file") from None
        if not isinstance(loaded, dict):
            raise UsageError(f"kubeconfig {path}: not a kubeconfig", "fix or remove the file")
        base = os.path.dirname(os.path.abspath(path))
        for key in ("clusters", "users", "contexts"):
            known = {entry.get("name") for entry in merged[key]}
            for entry in loaded.get(key) or []:
                if isinstance(entry, dict) and entry.get("name") not in known:
                    merged[key].append(_absolute(entry, base))
        if loaded.get("current-context") and "current-context" not in merged:
            merged["current-context"] = loaded["current-context"]
    return merged


_FILE_KEYS = ("certificate-authority", "client-certificate", "client-key", "tokenFile")


def _absolute(entry: dict[str, Any], base: str) -> dict[str, Any]:
    inner = dict(entry)
    for part in ("cluster", "user"):
        if isinstance(inner.get(part), dict):
            inner[part] = {key: (os.path.join(base, value) if key in _FILE_KEYS and isinstance(value, str)
                                 and not os.path.isabs(value) else value) for key, value in inner[part].items()}
    return inner


# kubectl's label selector: k=v, k==v, k!=v, k in (a,b), k notin (a,b), k, !k; comma-separated.
_TERM = re.compile(r"\s*(?:(?P<not>!)\s*(?P<absent>[\w./-]+)|(?P<key>[\w./-]+)\s*"
                   r"(?:(?P<op>==|=|!=)\s*(?P<value>[\w.-]*)|\s(?P<set>in|notin)\s*\((?P<values>[^)]*)\))?)\s*(?:,|$)")


def parse_selector(text: str) -> dict[str, Any]:
    """A label selector as kubectl takes it, as lightkube's operators."""
    from lightkube import operators

    found: dict[str, Any] = {}
    position = 0
    while position < len(text):
        term = _TERM.match(text, position)
        if term is None or term.end() == position:
            raise UsageError(f"label selector {text!r}: cannot read it from {text[position:]!r}",
                             "write it as kubectl does, e.g. -l pinctl.io/runtime=cri-o or -l 'zone in (a,b)'")
        position = term.end()
        if term["absent"]:
            found[term["absent"]] = operators.not_exists()
        elif term["op"] in ("=", "=="):
            found[term["key"]] = operators.equal(term["value"])
        elif term["op"] == "!=":
            found[term["key"]] = operators.not_equal(term["value"])
        elif term["set"]:
            values = [value.strip() for value in term["values"].split(",") if value.strip()]
            found[term["key"]] = operators.in_(values) if term["set"] == "in" else operators.not_in(values)
        else:
            found[term["key"]] = operators.exists()
    return found


def _slim(node: Any) -> dict[str, Any]:
    """A Node as fleet status reads it: its name, runtime and conditions. Taken as each page of
    500 arrives, so 10,000 Nodes (9 KB each, their image lists most of it) are never held whole."""
    status = node.status
    info = status.nodeInfo if status is not None else None
    conditions = [condition.to_dict() for condition in (status.conditions or [])] if status is not None else []
    return {"metadata": {"name": node.metadata.name if node.metadata else ""},
            "status": {"nodeInfo": {"containerRuntimeVersion": info.containerRuntimeVersion if info else ""},
                       "conditions": conditions}}


def _said(err: object) -> str:
    return " ".join(str(err).split()) or type(err).__name__

"""Certificates and kubeconfigs for the test control plane, made with openssl (as registry.py does).

One :class:`ClusterPki` per control plane, under its own directory:

* ``ca.crt``/``ca.key``: the cluster CA. It signs every certificate below, the apiserver trusts it
  for client certificates (``--client-ca-file``), and the controller-manager signs CSRs with it
  (``--cluster-signing-*``), so a kubelet's own certificate requests can be approved later.
* serving certificates for kube-apiserver, kube-controller-manager and kube-scheduler, for
  ``127.0.0.1`` and ``localhost`` (the apiserver's also for the in-cluster names and the first
  service IP), so every health check verifies a real chain instead of skipping verification;
* client certificates: the admin (``O=system:masters``), the controller-manager and the scheduler
  under the user names the apiserver's bootstrap RBAC binds (``system:kube-controller-manager``,
  ``system:kube-scheduler``), the apiserver's own towards kubelets, and, on demand, a node's
  (``CN=system:node:<name>``, ``O=system:nodes``: what the Node authorizer recognises);
* the service-account key pair: the apiserver signs tokens with the private key and checks them
  with the public one; the controller-manager's token controller signs with the same key.

Keys are ECDSA P-256 (what kubeadm can use too): each takes milliseconds, where RSA 2048 keys
cost visible time on a busy machine. Everything lives one day: a test session is far shorter.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import pathlib
import re
import subprocess
from collections.abc import Sequence

OPENSSL_TIMEOUT_S = 60.0
DAYS = "1"
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


class PkiError(RuntimeError):
    """openssl failed to make a key or certificate."""


@dataclasses.dataclass(frozen=True)
class KeyPair:
    cert: pathlib.Path
    key: pathlib.Path


def _openssl(*args: str) -> None:
    try:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=OPENSSL_TIMEOUT_S, text=True)
    except subprocess.CalledProcessError as exc:
        raise PkiError(f"openssl {args[0]} failed: {exc.stderr.strip()}") from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PkiError(f"openssl {args[0]}: {exc}") from exc


def subject(common_name: str, organizations: Sequence[str] = ()) -> str:
    """An openssl ``-subj`` string: ``/O=...`` for each organization (a group, to kubernetes), then ``/CN=``."""
    for part in (common_name, *organizations):
        if "/" in part or "=" in part:
            raise PkiError(f"subject part {part!r} may not hold '/' or '='")
    return "".join(f"/O={org}" for org in organizations) + f"/CN={common_name}"


def extensions(usage: str, dns_names: Sequence[str] = (), ips: Sequence[str] = ()) -> str:
    """The x509v3 extensions of a leaf certificate: ``usage`` is ``serverAuth`` or ``clientAuth``."""
    lines = [
        "basicConstraints = critical, CA:FALSE",
        "keyUsage = critical, digitalSignature, keyEncipherment",
        f"extendedKeyUsage = {usage}",
    ]
    alt = [f"DNS:{name}" for name in dns_names] + [f"IP:{ipaddress.ip_address(ip)}" for ip in ips]
    if alt:
        lines.append(f"subjectAltName = {', '.join(alt)}")
    return "\n".join(lines) + "\n"


class ClusterPki:
    """The CA, the service-account keys and every certificate of one control plane, under ``directory``."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.directory = directory
        self.ca = KeyPair(directory / "ca.crt", directory / "ca.key")
        self.service_account = KeyPair(directory / "sa.pub", directory / "sa.key")

    def create(self) -> ClusterPki:
        """The CA and the service-account key pair (leaf certificates are made as they are asked for)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        self._new_key(self.ca.key)
        _openssl("req", "-x509", "-new", "-key", str(self.ca.key), "-out", str(self.ca.cert), "-days", DAYS,
                 "-subj", "/CN=pinctl test cluster CA",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature")
        self._new_key(self.service_account.key)
        _openssl("pkey", "-in", str(self.service_account.key), "-pubout", "-out", str(self.service_account.cert))
        return self

    def _new_key(self, path: pathlib.Path) -> None:
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))
        path.chmod(0o600)

    def _issue(self, name: str, subj: str, ext: str) -> KeyPair:
        if not _NAME.fullmatch(name):
            raise PkiError(f"not a file name for a certificate: {name!r}")
        pair = KeyPair(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        csr = self.directory / f"{name}.csr"
        ext_file = self.directory / f"{name}.ext"
        ext_file.write_text(ext)
        self._new_key(pair.key)
        _openssl("req", "-new", "-key", str(pair.key), "-out", str(csr), "-subj", subj)
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca.cert), "-CAkey", str(self.ca.key),
                 "-CAcreateserial", "-out", str(pair.cert), "-days", DAYS, "-extfile", str(ext_file))
        csr.unlink()
        return pair

    def serving(self, name: str, dns_names: Sequence[str] = ("localhost",), ips: Sequence[str] = ("127.0.0.1",)) -> KeyPair:
        """A server certificate for the given names (``localhost`` and ``127.0.0.1`` unless told otherwise)."""
        return self._issue(name, subject(name), extensions("serverAuth", dns_names, ips))

    def client(self, name: str, common_name: str, organizations: Sequence[str] = ()) -> KeyPair:
        """A client certificate: kubernetes reads CN as the user name and each O as a group."""
        return self._issue(name, subject(common_name, organizations), extensions("clientAuth"))

    def node_client(self, node_name: str) -> KeyPair:
        """A kubelet's client certificate: the Node authorizer's user ``system:node:<name>`` in ``system:nodes``."""
        if not _NAME.fullmatch(node_name):
            raise PkiError(f"not a node name: {node_name!r}")
        return self.client(f"node-{node_name}", f"system:node:{node_name}", ("system:nodes",))


def kubeconfig(server: str, ca: pathlib.Path, user: str, credentials: KeyPair, context: str = "pinctl-test") -> dict[str, object]:
    """A kubeconfig (v1 Config) naming files, not embedding them: the paths outlive no test session."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(credentials.cert),
                                          "client-key": str(credentials.key)}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
        "current-context": context,
    }


def write_kubeconfig(path: pathlib.Path, server: str, ca: pathlib.Path, user: str, credentials: KeyPair) -> pathlib.Path:
    # JSON is YAML: every kubernetes client reads it.
    path.write_text(json.dumps(kubeconfig(server, ca, user, credentials), indent=2) + "\n")
    path.chmod(0o600)
    return path

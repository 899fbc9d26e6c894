"""A real registry on loopback (Debian's docker-registry, distribution 2.8), images pushed to it with
skopeo, a proxy in front of it that fails the first requests, and a containerd whose CRI reaches
it through hosts.toml."""

from __future__ import annotations

import atexit
import http.client
import http.server
import json
import pathlib
import shutil
import socket
import socketserver
import subprocess
import threading
import time
from typing import Optional

from tests.harness import images, runnable
from tests.harness.containerd import V3_IMAGES_TABLE, ContainerdDaemon
from tests.harness.ports import free_port

REGISTRY_BIN = "/usr/bin/docker-registry"
SKOPEO_BIN = "/usr/bin/skopeo"


class Registry:
    """docker-registry with a private config and storage under base_dir, on 127.0.0.1:port."""

    def __init__(self, base_dir: pathlib.Path, htpasswd: Optional[pathlib.Path] = None,
                 tls: Optional[tuple[pathlib.Path, pathlib.Path]] = None) -> None:
        self.base_dir = base_dir
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.htpasswd = htpasswd
        self.tls = tls
        self._proc: Optional[subprocess.Popen[bytes]] = None

    def config(self) -> str:
        lines = ["version: 0.1", "log:", "  level: warn", "storage:", "  filesystem:",
                 f"    rootdirectory: {self.base_dir / 'storage'}", "  delete:", "    enabled: true",
                 "http:", f"  addr: {self.host}"]
        if self.tls:
            lines += ["  tls:", f"    certificate: {self.tls[0]}", f"    key: {self.tls[1]}"]
        if self.htpasswd:
            lines += ["auth:", "  htpasswd:", "    realm: pinctl-test", f"    path: {self.htpasswd}"]
        return "\n".join(lines) + "\n"

    def start(self) -> Registry:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        config = self.base_dir / "config.yml"
        config.write_text(self.config())
        log = open(self.base_dir / "registry.log", "ab")
        self._proc = subprocess.Popen([REGISTRY_BIN, "serve", str(config)], stdin=subprocess.DEVNULL,
                                      stdout=log, stderr=subprocess.STDOUT)
        atexit.register(self.stop)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"docker-registry did not listen on {self.host}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(10)
        self._proc = None

    def push(self, work: pathlib.Path, recipe: images.ImageRecipe, creds: str = "",
             cert_dir: Optional[pathlib.Path] = None) -> images.ImageInfo:
        """Build the image and copy it to each of its references (which must name this registry)."""
        work.mkdir(parents=True, exist_ok=True)
        archive = work / f"{recipe.effective_seed.replace('/', '_').replace(':', '_')}.tar"
        info = images.build_archive(archive, [recipe])[0]
        for ref in recipe.refs:
            tag = ref.rsplit(":", 1)[1]
            args = [SKOPEO_BIN, "copy", "--quiet", "--dest-tls-verify=false", f"oci-archive:{archive}:{tag}",
                    f"docker://{ref}"]
            if not recipe.compress:
                # skopeo gzips plain layers on the way to a registry: level 0 keeps their full size.
                args[2:2] = ["--dest-compress-format", "gzip", "--dest-compress-level", "0"]
            if creds:
                args[2:2] = ["--dest-creds", creds]
            if cert_dir:
                args[2:2] = ["--dest-cert-dir", str(cert_dir)]
            subprocess.run(args, check=True, capture_output=True, timeout=120)
        return info


    def copy_in(self, source: str, path: str, timeout: float = 600.0) -> None:
        """skopeo copy of ``source`` (``oci-archive:FILE`` of one image, or ``docker://`` a name of this
        registry) to ``path`` (``repository:tag``) here, layers as they are."""
        subprocess.run([SKOPEO_BIN, "copy", "--quiet", "--src-tls-verify=false", "--dest-tls-verify=false", source,
                        f"docker://{self.host}/{path}"], check=True, capture_output=True, timeout=timeout)

    def push_runnable(self, work: pathlib.Path, recipe: runnable.RunnableRecipe) -> images.ImageInfo:
        """A runnable image (busybox and its payload, uncompressed) copied to its one reference here."""
        (ref,) = recipe.refs
        work.mkdir(parents=True, exist_ok=True)
        archive = work / f"runnable-{recipe.seed.replace('/', '_').replace(':', '_')}.tar"
        (info,) = runnable.build_runnable_archive(archive, [recipe])
        # One image in the layout: skopeo needs no name to find it. Level 0 keeps sizes exact.
        subprocess.run([SKOPEO_BIN, "copy", "--quiet", "--dest-tls-verify=false", "--dest-compress-format", "gzip",
                        "--dest-compress-level", "0", f"oci-archive:{archive}", f"docker://{ref}"],
                       check=True, capture_output=True, timeout=120)
        return info


class FailingProxy:
    """An HTTP proxy in front of a registry answering 500 to its first `failures` requests."""

    def __init__(self, upstream: str, failures: int) -> None:
        self.upstream = upstream
        self.failures = failures
        self.seen = 0
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self._relay()

            def do_GET(self) -> None:
                self._relay()

            def _relay(self) -> None:
                proxy.seen += 1
                if proxy.seen <= proxy.failures:
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                conn = http.client.HTTPConnection(proxy.upstream, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                conn.request(self.command, self.path, headers=headers)
                reply = conn.getresponse()
                body = reply.read()
                self.send_response(reply.status)
                for key, value in reply.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                length = reply.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class RegistryContainerd(ContainerdDaemon):
    """A containerd whose CRI reads registry hosts from certs.d/<host>/hosts.toml (config_path)."""

    @property
    def certs_dir(self) -> pathlib.Path:
        return self.base_dir / "certs.d"

    def render_config(self) -> str:
        # 2.x (config version 3) moved the registry settings to the CRI's images plugin.
        cri_table = V3_IMAGES_TABLE if self.config_version >= 3 else '[plugins."io.containerd.grpc.v1.cri"]'
        table = f"{cri_table[:-1]}.registry]"
        return super().render_config() + f"{table}\n  config_path = {json.dumps(str(self.certs_dir))}\n"

    def add_host(self, host: str, scheme: str = "http", ca: Optional[pathlib.Path] = None) -> None:
        directory = self.certs_dir / host
        directory.mkdir(parents=True, exist_ok=True)
        lines = [f'server = "{scheme}://{host}"', "", f'[host."{scheme}://{host}"]',
                 '  capabilities = ["pull", "resolve"]']
        if ca is not None:
            lines.append(f"  ca = {json.dumps(str(ca))}")
        (directory / "hosts.toml").write_text("\n".join(lines) + "\n")


def make_ca_and_cert(directory: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """A throwaway CA and a certificate for 127.0.0.1 it signed: (ca.crt, server.crt, server.key)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_crt = directory / "ca.key", directory / "ca.crt"
    key, csr, crt = directory / "server.key", directory / "server.csr", directory / "server.crt"
    ext = directory / "ext.cnf"
    ext.write_text("subjectAltName = IP:127.0.0.1\n")
    run = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)  # noqa: E731
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca_crt),
        "-days", "1", "-subj", "/CN=pinctl test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(crt), "-days", "1", "-extfile", str(ext))
    return ca_crt, crt, key


def htpasswd_file(path: pathlib.Path, user: str, password: str) -> pathlib.Path:
    subprocess.run(["htpasswd", "-Bbc", str(path), user, password], check=True, capture_output=True, timeout=30)
    return path


def available() -> Optional[str]:
    """Why registry tests cannot run here, or None."""
    for binary in (REGISTRY_BIN, SKOPEO_BIN):
        if not shutil.which(binary):
            return f"{binary} is missing: add docker-registry and skopeo (scripts/test-packages.txt)"
    return None



"""A real Kubernetes control plane on loopback: etcd + kube-apiserver, no kubelet.

Configured like controller-runtime's envtest: a throw-away certificate authority, a serving
certificate for 127.0.0.1, an admin client certificate in `system:masters`, service-account
signing keys generated per run, RBAC authorization, the ServiceAccount admission plugin off
(no controller-manager creates tokens), service CIDR 10.0.0.0/24, etcd without fsync.

The binaries are built from Go modules by `tools/build.sh` and cached outside the checkout.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from scrapeq.local.certificates import issue_certificate, make_authority, make_service_account_keys
from scrapeq.local.processes import (
    LocalPartError,
    free_port,
    spawn_logged,
    terminate,
    wait_until,
)

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPOSITORY_ROOT / "tools" / "build.sh"

# Long enough for a cold kube-apiserver on a busy 2-core machine to install its CRDs,
# bootstrap RBAC roles and priority levels.
READY_TIMEOUT_SECONDS = 120.0


def tool_path(tool: str) -> Path:
    """Return the cached binary for `tool` (kube-apiserver, etcd, helm), building it if needed.

    SCRAPEQ_<TOOL>_BINARY (e.g. SCRAPEQ_KUBE_APISERVER_BINARY) overrides the build.
    """
    override = os.environ.get(f"SCRAPEQ_{tool.upper().replace('-', '_')}_BINARY")
    if override:
        return Path(override)
    if not BUILD_SCRIPT.exists():
        raise LocalPartError(f"{BUILD_SCRIPT} is missing; run from a scrapeq checkout")
    # A first build takes minutes: its progress goes to our stderr, so nobody waits in silence.
    result = subprocess.run(
        [str(BUILD_SCRIPT), tool], stdout=subprocess.PIPE, text=True, check=False, timeout=3600
    )
    if result.returncode != 0:
        raise LocalPartError(f"building {tool} failed (its output is above)")
    return Path(result.stdout.strip().splitlines()[-1])


@dataclass
class LocalControlPlane:
    """etcd + kube-apiserver on 127.0.0.1, with an admin kubeconfig written to `kubeconfig`."""

    state_dir: Path | None = None
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list, init=False)
    _owned_dir: bool = field(default=False, init=False)
    secure_port: int = field(default=0, init=False)

    @property
    def kubeconfig(self) -> Path:
        assert self.state_dir is not None
        return self.state_dir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.secure_port}"

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self._processes]

    def start(self) -> None:
        """Start etcd and kube-apiserver and wait until /readyz answers `ok`."""
        etcd_binary = tool_path("etcd")
        apiserver_binary = tool_path("kube-apiserver")
        if self.state_dir is None:
            self.state_dir = Path(tempfile.mkdtemp(prefix="scrapeq-cluster-"))
            self._owned_dir = True
        self.state_dir.mkdir(parents=True, exist_ok=True)
        certs = self.state_dir / "certs"
        certs.mkdir(exist_ok=True)
        _make_certificates(certs)
        try:
            etcd_url = self._start_etcd(etcd_binary)
            self._start_apiserver(apiserver_binary, etcd_url, certs)
            self._write_kubeconfig(certs)
            self._wait_ready(certs)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        assert self.state_dir is not None
        process = spawn_logged(command, self.state_dir / f"{name}.log")
        self._processes.append(process)
        return process

    def _log_tail(self, name: str) -> str:
        assert self.state_dir is not None
        path = self.state_dir / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def _start_etcd(self, binary: Path) -> str:
        assert self.state_dir is not None
        client_port, peer_port = free_port(), free_port()
        client_url = f"http://127.0.0.1:{client_port}"
        process = self._spawn(
            "etcd",
            [
                str(binary),
                "--name=scrapeq",
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=scrapeq=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        wait_until(
            lambda: http_ok(f"{client_url}/health"),
            timeout=60,
            what="etcd to become healthy",
            failed=lambda: _exited(process, "etcd", self._log_tail("etcd")),
        )
        return client_url

    def _start_apiserver(self, binary: Path, etcd_url: str, certs: Path) -> None:
        self.secure_port = free_port()
        process = self._spawn(
            "kube-apiserver",
            [
                str(binary),
                f"--etcd-servers={etcd_url}",
                f"--cert-dir={certs}",
                f"--secure-port={self.secure_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                "--authorization-mode=RBAC",
                f"--client-ca-file={certs / 'ca.crt'}",
                f"--tls-cert-file={certs / 'apiserver.crt'}",
                f"--tls-private-key-file={certs / 'apiserver.key'}",
                f"--service-account-issuer=https://127.0.0.1:{self.secure_port}",
                f"--service-account-key-file={certs / 'service-account.pub'}",
                f"--service-account-signing-key-file={certs / 'service-account.key'}",
                "--disable-admission-plugins=ServiceAccount",
                "--enable-priority-and-fairness=false",
                "--endpoint-reconciler-type=none",
                "--v=0",
            ],
        )
        self._apiserver = process

    def _write_kubeconfig(self, certs: Path) -> None:
        write_kubeconfig(self.kubeconfig, self.server, certs, "admin")

    def _wait_ready(self, certs: Path) -> None:
        context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        context.load_cert_chain(str(certs / "admin.crt"), str(certs / "admin.key"))

        def ready() -> bool:
            return http_ok(f"{self.server}/readyz", context=context)

        wait_until(
            ready,
            timeout=READY_TIMEOUT_SECONDS,
            what="kube-apiserver /readyz",
            interval=0.2,
            failed=lambda: _exited(
                self._apiserver, "kube-apiserver", self._log_tail("kube-apiserver")
            ),
        )

    def stop(self) -> None:
        """Stop kube-apiserver, then etcd; remove the state directory if we created it."""
        for process in reversed(self._processes):
            terminate(process)
        self._processes.clear()
        if self._owned_dir and self.state_dir is not None:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            self.state_dir = None

    def __enter__(self) -> LocalControlPlane:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def write_kubeconfig(path: Path, server: str, certs: Path, user: str) -> None:
    """Write a kubeconfig for `server` that authenticates with `<user>.crt`/`<user>.key` from
    `certs` (signed by `certs/ca.crt`, which also verifies the server)."""

    def encoded(name: str) -> str:
        return base64.b64encode((certs / name).read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "scrapeq-local",
                "cluster": {"server": server, "certificate-authority-data": encoded("ca.crt")},
            }
        ],
        "users": [
            {
                "name": f"scrapeq-{user}",
                "user": {
                    "client-certificate-data": encoded(f"{user}.crt"),
                    "client-key-data": encoded(f"{user}.key"),
                },
            }
        ],
        "contexts": [
            {
                "name": "scrapeq-local",
                "context": {"cluster": "scrapeq-local", "user": f"scrapeq-{user}"},
            }
        ],
        "current-context": "scrapeq-local",
    }
    # JSON is valid YAML, and kubectl and the Python client both read it.
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)


def _exited(process: subprocess.Popen[bytes], name: str, log_tail: str) -> str | None:
    code = process.poll()
    if code is None:
        return None
    return f"{name} exited with code {code}:\n{log_tail}"


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    """True when `url` answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def _make_certificates(directory: Path) -> None:
    """Create the CA, serving, admin-client and service-account key material with openssl."""
    if (directory / "admin.crt").exists():
        return
    make_authority(directory, "scrapeq-local-ca")
    issue_certificate(
        directory,
        "apiserver",
        "/CN=kube-apiserver",
        server_names=[
            "127.0.0.1", "10.0.0.1", "localhost", "kubernetes", "kubernetes.default",
            "kubernetes.default.svc",
        ],
    )  # fmt: skip
    issue_certificate(directory, "admin", "/O=system:masters/CN=scrapeq-admin", client=True)
    make_service_account_keys(directory)

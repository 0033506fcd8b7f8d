"""A real single-node Kubernetes cluster on this machine, for the demo and the tests that need Pods.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and CoreDNS
(all built from Go modules by `tools/build.sh`) run as host processes next to a private
containerd (Debian's containerd, runc and CNI plugins). Pods get addresses on a bridge of their
own (POD_NETWORK), Services come from SERVICE_NETWORK, and the cluster DNS answers only names
under cluster.local, so nothing a pod looks up or sends leaves this machine unless it names an
outside address itself.

The kubelet and kube-proxy use fixed ports and change machine-wide settings (sysctls, iptables
chains, mounts, cgroups), so there is one node per machine: a record in RECORD_DIR names the
running node, a second start fails at once naming it, and `stop` (or `clean_leftovers`, after a
crash) undoes everything the node did to the host. Needs root.

What this machine kind needs, measured: the pod sandbox's negative oom_score_adj is refused
because root here lacks CAP_SYS_RESOURCE (`runc create failed: ... can't get final child's PID
from pipe: EOF`), so containerd restricts oom_score_adj; there is no systemd, so cgroupfs; there
is no registry, so images are loaded into containerd (`scrapeq dev images`) and pods use
`imagePullPolicy: Never`. See docs/local-node.md, "Facts this machine kind needs".
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from scrapeq.local.certificates import issue_certificate, make_authority, make_service_account_keys
from scrapeq.local.controlplane import REPOSITORY_ROOT, http_ok, tool_path, write_kubeconfig
from scrapeq.local.processes import (
    LocalPartError,
    pid_alive,
    run_kubectl,
    spawn_logged,
    terminate,
    terminate_pid,
    wait_until,
)

logger = logging.getLogger(__name__)

# Machine-wide: the record of the running node and the sysctls to restore. /run is emptied on
# boot, when every process the record names is gone too.
RECORD_DIR = Path("/run/scrapeq-node")
RECORD = RECORD_DIR / "node.json"
CONTAINERD_SOCKET = RECORD_DIR / "containerd.sock"

DEFAULT_STATE_DIR = REPOSITORY_ROOT / ".scrapeq" / "node"
CACHE_DIR = Path(
    os.environ.get("SCRAPEQ_CACHE_DIR")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "scrapeq"
)
# Images cannot be pulled again here, so containerd's content store outlives the node: a new
# node starts with every image an earlier one was given.
CONTAINERD_ROOT = CACHE_DIR / "node" / "containerd"

# Networks of the node's own making. Pods: one bridge, one /24. Services: a /24 whose first
# address is the API server's Service and whose tenth is the cluster DNS.
POD_NETWORK = ipaddress.ip_network("10.244.0.0/24")
SERVICE_NETWORK = ipaddress.ip_network("10.96.0.0/24")
BRIDGE = "scrapeq0"
# The host's own address on the pod network (the bridge's): pods reach servers bound here, and
# the node creates it before any pod, so tests and the demo serve their sites on it.
POD_GATEWAY = str(POD_NETWORK[1])
CLUSTER_DOMAIN = "cluster.local"

# Fixed ports: the kubelet's and kube-proxy's are fixed anyway (10248/10250, 10249/10256);
# the API server uses the usual 6443 so in-cluster clients see an ordinary cluster.
APISERVER_PORT = 6443
ETCD_CLIENT_PORT = 12379
ETCD_PEER_PORT = 12380
FIXED_PORTS = {
    "kube-apiserver": APISERVER_PORT,
    "etcd": ETCD_CLIENT_PORT,
    "kubelet": 10250,
    "kube-controller-manager": 10257,
    "kube-scheduler": 10259,
    "kube-proxy": 10256,
    "coredns": 53,
}

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"

# Machine-wide settings the kubelet, kube-proxy and the bridge plugin change; saved before the
# first start and written back by `stop`.
SYSCTLS = (
    "vm/overcommit_memory",
    "kernel/panic",
    "kernel/panic_on_oops",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
)
# Paths created outside the node's directories whatever they are told: the kubelet's
# device-plugin and log directories, the CNI library's result cache, containerd's shim sockets
# and the network namespaces' mount directory. Removed by `stop` when they did not exist before.
FIXED_PATHS = (
    Path("/var/lib/kubelet"),
    Path("/var/log/containers"),
    Path("/var/log/pods"),
    Path("/var/lib/cni"),
    Path("/run/containerd"),
    Path("/run/netns"),
)

# Start order; `stop` goes backwards.
COMPONENTS = (
    "containerd",
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "coredns",
)

# Measured on 2 cores: the whole node is Ready about 10 s after the first process starts; a
# busy machine (a test suite beside it) can take several times that.
READY_TIMEOUT_SECONDS = 180.0


class NodeRecord(TypedDict):
    """What RECORD says about the running node."""

    state_dir: str
    kubeconfig: str
    server: str
    node_ip: str
    hostname: str
    pids: dict[str, int]


class NodeUnavailable(LocalPartError):
    """This machine cannot run the local node (not root, a package missing, another node)."""


@dataclass
class LocalNode:
    """The single-node cluster. `start()` brings it to Ready; `stop()` undoes everything."""

    state_dir: Path = DEFAULT_STATE_DIR
    progress: Callable[[str], None] = field(default=lambda message: None)
    node_ip: str = field(default="", init=False)
    hostname: str = field(default="", init=False)
    pids: dict[str, int] = field(default_factory=dict, init=False)
    # The processes this object started (a node attached to knows only their pids).
    _children: dict[str, subprocess.Popen[bytes]] = field(
        default_factory=dict, init=False, repr=False
    )

    # -- where things are --------------------------------------------------------------------

    @property
    def certs(self) -> Path:
        return self.state_dir / "certs"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (`export KUBECONFIG=…`)."""
        return self.state_dir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://{self.node_ip}:{APISERVER_PORT}"

    @property
    def containerd_address(self) -> Path:
        return CONTAINERD_SOCKET

    @property
    def cluster_dns(self) -> str:
        return self.node_ip

    def log_path(self, component: str) -> Path:
        return self.state_dir / "logs" / f"{component}.log"

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, *, load_images: Callable[[LocalNode], None] | None = None) -> None:
        """Start every component and wait until the node is Ready and the cluster DNS answers.

        `load_images` runs once containerd is up and before the kubelet starts, so that the
        pause image (and any other) is present when the first pod is scheduled.
        """
        check_prerequisites()
        running = running_node()
        if running is not None:
            raise NodeUnavailable(
                f"a local node is already running on this machine (state in {running['state_dir']},"
                f" pids {sorted(running['pids'].values())}); stop it with `make cluster-down`"
                f" from that checkout, or use it with KUBECONFIG={running['kubeconfig']}"
            )
        clean_leftovers()
        self._check_ports_free()
        self.node_ip, self.hostname = node_address(), node_name()
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir)
        for directory in (self.certs, self.state_dir / "logs", RECORD_DIR, CONTAINERD_ROOT):
            directory.mkdir(parents=True, exist_ok=True)
        self._save_host_settings()
        self._write_record()
        steps: list[tuple[str, Callable[[], None]]] = [
            ("certificates and configuration", self._write_configuration),
            ("pod network bridge", self._create_bridge),
            ("containerd", self._start_containerd),
            ("images", lambda: load_images(self) if load_images else None),
            ("etcd", self._start_etcd),
            ("kube-apiserver", self._start_apiserver),
            ("controller-manager, scheduler, kubelet, kube-proxy", self._start_node_components),
            ("cluster DNS", self._start_coredns),
            ("node Ready", self._wait_node_ready),
        ]
        try:
            for number, (what, step) in enumerate(steps, start=1):
                started = time.monotonic()
                self.progress(f"[{number}/{len(steps)}] {what}")
                step()
                self._write_record()
                self.progress(f"[{number}/{len(steps)}] {what}: {time.monotonic() - started:.1f}s")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the node and undo what it changed on the host (see `clean_leftovers`)."""
        try:
            if self.kubeconfig.exists() and pid_alive(self.pids.get("kubelet", 0) or -1):
                self._delete_pods()
        except (LocalPartError, OSError, subprocess.SubprocessError) as error:
            # A node whose parts already died cannot delete its pods; clean_leftovers can.
            logger.warning("could not delete the node's pods first: %s", error)
        finally:
            for component in reversed(COMPONENTS):
                self._stop_component(component)
            clean_leftovers()

    def _stop_component(self, component: str) -> None:
        pid = self.pids.pop(component, None)
        child = self._children.pop(component, None)
        if child is not None:
            terminate(child, grace=10)
        elif pid is not None:
            terminate_pid(pid, grace=10)

    def __enter__(self) -> LocalNode:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- steps -------------------------------------------------------------------------------

    def _check_ports_free(self) -> None:
        busy = []
        for component, port in FIXED_PORTS.items():
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(("0.0.0.0", port))
                except OSError:
                    busy.append(f"{port} ({component})")
        if busy:
            raise NodeUnavailable(
                f"ports the local node needs are in use: {', '.join(busy)}; is another"
                " Kubernetes node running on this machine?"
            )

    def _write_configuration(self) -> None:
        make_authority(self.certs, "scrapeq-node-ca")
        first_service_ip = str(SERVICE_NETWORK[1])
        issue_certificate(
            self.certs,
            "apiserver",
            "/CN=kube-apiserver",
            server_names=[
                self.node_ip, "127.0.0.1", first_service_ip, "localhost", "kubernetes",
                "kubernetes.default", "kubernetes.default.svc",
                f"kubernetes.default.svc.{CLUSTER_DOMAIN}",
            ],
        )  # fmt: skip
        issue_certificate(
            self.certs, "kubelet-serving", f"/CN={self.hostname}",
            server_names=[self.node_ip, self.hostname, "127.0.0.1"],
        )  # fmt: skip
        clients = {
            "admin": "/O=system:masters/CN=scrapeq-admin",
            # The API server's identity towards kubelets (logs, exec, port-forward).
            "apiserver-kubelet-client": "/O=system:masters/CN=kube-apiserver-kubelet-client",
            "controller-manager": "/CN=system:kube-controller-manager",
            "scheduler": "/CN=system:kube-scheduler",
            "kubelet": f"/O=system:nodes/CN=system:node:{self.hostname}",
            "kube-proxy": "/CN=system:kube-proxy",
            "coredns": "/CN=scrapeq:coredns",
        }
        for user, subject in clients.items():
            issue_certificate(self.certs, user, subject, client=True)
            if user != "apiserver-kubelet-client":
                write_kubeconfig(self._kubeconfig_of(user), self.server, self.certs, user)
        make_service_account_keys(self.certs)
        (self.state_dir / "kubelet-root").mkdir(exist_ok=True)
        self._write_containerd_config()
        self._write_cni_config()
        self._write_kubelet_config()
        self._write_kube_proxy_config()
        self._write_corefile()

    def _kubeconfig_of(self, user: str) -> Path:
        return self.kubeconfig if user == "admin" else self.state_dir / f"{user}.kubeconfig"

    def _write_containerd_config(self) -> None:
        directory = self.state_dir / "containerd"
        directory.mkdir(exist_ok=True)
        cri = '[plugins."io.containerd.grpc.v1.cri"]'
        (directory / "config.toml").write_text(
            f"""version = 2
root = "{CONTAINERD_ROOT}"
state = "{RECORD_DIR / "containerd-state"}"

[grpc]
  address = "{CONTAINERD_SOCKET}"

{cri}
  sandbox_image = "{PAUSE_IMAGE}"
  # Root here lacks CAP_SYS_RESOURCE: a negative oom_score_adj (the sandbox's -998) is refused
  # and every pod sandbox fails; restricting it keeps the kubelet's values within what root may set.
  restrict_oom_score_adj = true

{cri[:-1]}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

{cri[:-1]}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

{cri[:-1]}.containerd.runtimes.runc.options]
  # No systemd on this machine: cgroupfs, as the kubelet is told too.
  SystemdCgroup = false

{cri[:-1]}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{self.state_dir / "cni" / "net.d"}"
"""
        )

    def _write_cni_config(self) -> None:
        directory = self.state_dir / "cni" / "net.d"
        directory.mkdir(parents=True, exist_ok=True)
        config = {
            "cniVersion": "0.4.0",
            "name": "scrapeq",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": True,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": str(POD_NETWORK)}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.state_dir / "cni" / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        (directory / "10-scrapeq.conflist").write_text(json.dumps(config, indent=2))

    def _write_kubelet_config(self) -> None:
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "failCgroupV1": False,
            "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.certs / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": str(self.certs / "kubelet-serving.crt"),
            "tlsPrivateKeyFile": str(self.certs / "kubelet-serving.key"),
            "clusterDomain": CLUSTER_DOMAIN,
            "clusterDNS": [self.cluster_dns],
            # A developer's disk is often fuller than a server's: evict only when nearly full.
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
            },
            # Images cannot be pulled again here: never garbage-collect them.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "podLogsDir": str(self.state_dir / "pod-logs"),
            "healthzBindAddress": "127.0.0.1",
            "resolvConf": str(self._write_pod_resolv_conf()),
            "nodeStatusReportFrequency": "10s",
        }
        (self.state_dir / "kubelet.yaml").write_text(json.dumps(config, indent=2))

    def _write_pod_resolv_conf(self) -> Path:
        # Pods see only the cluster DNS: no search domain or resolver of the host's.
        path = self.state_dir / "pod-resolv.conf"
        path.write_text("")
        return path

    def _write_kube_proxy_config(self) -> None:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self._kubeconfig_of("kube-proxy"))},
            "mode": "iptables",
            "clusterCIDR": str(POD_NETWORK),
            "hostnameOverride": self.hostname,
            "bindAddress": self.node_ip,
            "metricsBindAddress": "127.0.0.1:10249",
            "healthzBindAddress": "127.0.0.1:10256",
            # Zero leaves the machine's conntrack sysctls as they are.
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
        }
        (self.state_dir / "kube-proxy.yaml").write_text(json.dumps(config, indent=2))

    def _write_corefile(self) -> None:
        (self.state_dir / "Corefile").write_text(
            f"""{CLUSTER_DOMAIN}:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {self.cluster_dns}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {self._kubeconfig_of("coredns")}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 30
    loadbalance
}}
# Any other name: no such domain. Nothing a pod looks up is forwarded off this machine.
.:53 {{
    bind {self.cluster_dns}
    template ANY ANY . {{
        rcode NXDOMAIN
    }}
}}
"""
        )

    def _spawn(self, component: str, command: list[str]) -> int:
        # The node outlives `make cluster-up`: its parts run in sessions of their own.
        process = spawn_logged(command, self.log_path(component), append=True)
        self.pids[component] = process.pid
        self._children[component] = process
        return process.pid

    def _binary(self, tool: str) -> str:
        return str(tool_path(tool))

    def _exited(self, component: str) -> str | None:
        pid = self.pids.get(component)
        if pid is not None and pid_alive(pid):
            return None
        tail = self.log_path(component).read_text(errors="replace")[-3000:]
        return f"{component} exited:\n{tail}"

    def _wait(self, component: str, condition: Callable[[], bool], what: str) -> None:
        wait_until(
            condition,
            timeout=READY_TIMEOUT_SECONDS,
            what=what,
            interval=0.1,
            failed=lambda: self._exited(component),
        )

    def _create_bridge(self) -> None:
        """Create the pods' bridge with the gateway address now, not at the first pod, so that
        servers for pods can bind POD_GATEWAY before any pod exists. The bridge plugin adopts it."""
        for command in (
            ["ip", "link", "add", BRIDGE, "type", "bridge"],
            ["ip", "addr", "add", f"{POD_GATEWAY}/{POD_NETWORK.prefixlen}", "dev", BRIDGE],
            ["ip", "link", "set", BRIDGE, "up"],
        ):
            result = subprocess.run(
                command, capture_output=True, text=True, check=False, timeout=10
            )
            if result.returncode != 0:
                raise LocalPartError(f"{' '.join(command)} failed: {result.stderr.strip()}")

    def _start_containerd(self) -> None:
        self._spawn(
            "containerd",
            ["containerd", "--config", str(self.state_dir / "containerd" / "config.toml")],
        )
        self._wait("containerd", CONTAINERD_SOCKET.exists, "containerd's socket")
        self._wait("containerd", lambda: _ctr_answers(CONTAINERD_SOCKET), "containerd to answer")

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{ETCD_CLIENT_PORT}"
        peer = f"http://127.0.0.1:{ETCD_PEER_PORT}"
        self._spawn(
            "etcd",
            [
                self._binary("etcd"),
                "--name=scrapeq-node",
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=scrapeq-node={peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", lambda: http_ok(f"{client}/health"), "etcd to become healthy")

    def _start_apiserver(self) -> None:
        certs = self.certs
        self._spawn(
            "kube-apiserver",
            [
                self._binary("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{ETCD_CLIENT_PORT}",
                f"--secure-port={APISERVER_PORT}",
                f"--advertise-address={self.node_ip}",
                f"--service-cluster-ip-range={SERVICE_NETWORK}",
                "--allow-privileged=true",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--client-ca-file={certs / 'ca.crt'}",
                f"--tls-cert-file={certs / 'apiserver.crt'}",
                f"--tls-private-key-file={certs / 'apiserver.key'}",
                f"--kubelet-client-certificate={certs / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={certs / 'apiserver-kubelet-client.key'}",
                f"--kubelet-certificate-authority={certs / 'ca.crt'}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                f"--service-account-issuer=https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
                f"--service-account-key-file={certs / 'service-account.pub'}",
                f"--service-account-signing-key-file={certs / 'service-account.key'}",
                # One node and a handful of clients: fairness queues cost CPU and buy nothing.
                "--enable-priority-and-fairness=false",
                "--v=0",
            ],
        )
        context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        context.load_cert_chain(str(certs / "admin.crt"), str(certs / "admin.key"))
        self._wait(
            "kube-apiserver",
            lambda: http_ok(f"{self.server}/readyz", context=context),
            "kube-apiserver /readyz",
        )

    def _start_node_components(self) -> None:
        certs = self.certs
        self._spawn(
            "kube-controller-manager",
            [
                self._binary("kube-controller-manager"),
                f"--kubeconfig={self._kubeconfig_of('controller-manager')}",
                f"--authentication-kubeconfig={self._kubeconfig_of('controller-manager')}",
                f"--authorization-kubeconfig={self._kubeconfig_of('controller-manager')}",
                f"--service-account-private-key-file={certs / 'service-account.key'}",
                f"--root-ca-file={certs / 'ca.crt'}",
                "--use-service-account-credentials=true",
                f"--cluster-signing-cert-file={certs / 'ca.crt'}",
                f"--cluster-signing-key-file={certs / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_NETWORK}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "--v=0",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                self._binary("kube-scheduler"),
                f"--kubeconfig={self._kubeconfig_of('scheduler')}",
                f"--authentication-kubeconfig={self._kubeconfig_of('scheduler')}",
                f"--authorization-kubeconfig={self._kubeconfig_of('scheduler')}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "--v=0",
            ],
        )
        self._spawn(
            "kubelet",
            [
                self._binary("kubelet"),
                f"--config={self.state_dir / 'kubelet.yaml'}",
                f"--kubeconfig={self._kubeconfig_of('kubelet')}",
                f"--root-dir={self.state_dir / 'kubelet-root'}",
                f"--hostname-override={self.hostname}",
                f"--node-ip={self.node_ip}",
                "--v=0",
            ],
        )
        self._spawn(
            "kube-proxy",
            [self._binary("kube-proxy"), f"--config={self.state_dir / 'kube-proxy.yaml'}"],
        )

    def _start_coredns(self) -> None:
        self._kubectl("apply", "-f", "-", stdin=_COREDNS_RBAC)
        self._spawn("coredns", [self._binary("coredns"), "-conf", str(self.state_dir / "Corefile")])
        name = f"kubernetes.default.svc.{CLUSTER_DOMAIN}"
        self._wait(
            "coredns",
            lambda: dns_lookup(self.cluster_dns, name) == str(SERVICE_NETWORK[1]),
            f"the cluster DNS to answer {name}",
        )

    def _wait_node_ready(self) -> None:
        self._wait("kubelet", self._node_ready, f"node {self.hostname} to become Ready")
        # Pods of a new namespace need its `default` ServiceAccount, made by the
        # controller-manager; tests create namespaces right after start.
        self._wait(
            "kube-controller-manager",
            lambda: self._kubectl("get", "serviceaccount", "default", check=False).returncode == 0,
            "the default ServiceAccount",
        )
        self._kubectl("apply", "-f", "-", stdin=self._storage_manifest())

    def _node_ready(self) -> bool:
        result = self._kubectl(
            "get", "node", self.hostname, "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
            check=False,
        )  # fmt: skip
        return result.returncode == 0 and result.stdout.strip() == "True"

    def _storage_manifest(self) -> str:
        """A default StorageClass and hostPath PersistentVolumes under the state directory, so
        charts with volumeClaimTemplates (the bundled PostgreSQL) bind as on a real cluster."""
        volumes = []
        for number in range(STORAGE_VOLUMES):
            path = self.state_dir / "volumes" / f"volume-{number}"
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o777)
            volumes.append(
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolume",
                    "metadata": {"name": f"scrapeq-node-volume-{number}"},
                    "spec": {
                        "capacity": {"storage": "10Gi"},
                        "accessModes": ["ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain",
                        "storageClassName": "local",
                        "hostPath": {"path": str(path), "type": "Directory"},
                    },
                }
            )
        storage_class = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": "local",
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            },
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "Immediate",
        }
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": [storage_class, *volumes]})

    def recycle_volumes(self) -> None:
        """Make the node's Released volumes available again, emptied (what a `Recycle` policy
        did before it was deprecated), so that a new install can claim them."""
        volumes = json.loads(self._kubectl("get", "persistentvolumes", "-o", "json").stdout)
        for volume in volumes["items"]:
            if volume.get("status", {}).get("phase") != "Released":
                continue
            path = Path(volume["spec"]["hostPath"]["path"])
            if path.is_relative_to(self.state_dir):
                for entry in path.iterdir():
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry)
                    else:
                        entry.unlink()
            self._kubectl(
                "patch", "persistentvolume", volume["metadata"]["name"], "--type=json",
                "-p", '[{"op": "remove", "path": "/spec/claimRef"}]',
            )  # fmt: skip

    def _delete_pods(self) -> None:
        """Delete every pod through the API while the kubelet runs, so that each sandbox is
        stopped properly (the bridge plugin releases its address and iptables rules)."""
        self._stop_component("kube-controller-manager")
        self._kubectl(
            "delete", "pods", "--all", "--all-namespaces", "--grace-period=0", "--force",
            "--wait=false", check=False,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _running_sandboxes():
            time.sleep(0.2)

    def _kubectl(
        self, *arguments: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return run_kubectl(
            self.kubeconfig, "--request-timeout=20s", *arguments, stdin=stdin, check=check,
            timeout=60,
        )  # fmt: skip

    # -- the machine-wide record -------------------------------------------------------------

    def _save_host_settings(self) -> None:
        saved = RECORD_DIR / "host-settings.json"
        if saved.exists():
            # Saved by a node that was never stopped properly: those are the machine's values.
            return
        values = {}
        for name in SYSCTLS:
            path = Path("/proc/sys") / name
            if path.exists():
                values[name] = path.read_text().strip()
        created = [str(path) for path in FIXED_PATHS if not path.exists()]
        saved.write_text(json.dumps({"sysctls": values, "created_paths": created}))

    def _write_record(self) -> None:
        record: NodeRecord = {
            "state_dir": str(self.state_dir),
            "kubeconfig": str(self.kubeconfig),
            "server": self.server,
            "node_ip": self.node_ip,
            "hostname": self.hostname,
            "pids": self.pids,
        }
        RECORD.write_text(json.dumps(record, indent=2))

    @classmethod
    def attach(cls) -> LocalNode | None:
        """The node that is running on this machine, if any, to use or to stop."""
        record = running_node()
        if record is None:
            return None
        node = cls(state_dir=Path(record["state_dir"]))
        node.node_ip, node.hostname = record["node_ip"], record["hostname"]
        node.pids = {name: int(pid) for name, pid in record["pids"].items()}
        return node


# hostPath volumes the node offers to PersistentVolumeClaims (the bundled PostgreSQL takes one).
STORAGE_VOLUMES = 8

_COREDNS_RBAC = json.dumps(
    {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "scrapeq:coredns"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["endpoints", "services", "pods", "namespaces"],
                        "verbs": ["list", "watch"],
                    },
                    {
                        "apiGroups": ["discovery.k8s.io"],
                        "resources": ["endpointslices"],
                        "verbs": ["list", "watch"],
                    },
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "scrapeq:coredns"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "scrapeq:coredns",
                },
                "subjects": [
                    {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "User",
                        "name": "scrapeq:coredns",
                    }
                ],
            },
        ],
    }
)


# -- the host ------------------------------------------------------------------------------


def node_unavailable() -> str | None:
    """The one-line reason this machine cannot run the node, or None when it can."""
    try:
        check_prerequisites()
    except NodeUnavailable as error:
        return str(error)
    return None


def check_prerequisites() -> None:
    """Raise NodeUnavailable with the one reason this machine cannot run the node."""
    if os.geteuid() != 0:
        raise NodeUnavailable(
            "the local node needs root (the kubelet manages cgroups, mounts and iptables)"
        )
    missing = [
        name
        for name, path in {
            "containerd": "/usr/bin/containerd",
            "runc": "/usr/sbin/runc",
            "containernetworking-plugins": "/usr/lib/cni/bridge",
            "iptables": "/usr/sbin/iptables",
            "conntrack": "/usr/sbin/conntrack",
        }.items()
        if not Path(path).exists()
    ]
    if missing:
        raise NodeUnavailable(
            f"Debian packages missing for the local node: {' '.join(missing)}"
            " (scripts/ensure-system-packages.sh node installs them)"
        )
    if (
        not Path("/sys/fs/cgroup/memory").is_dir()
        and not Path("/sys/fs/cgroup/cgroup.controllers").exists()
    ):
        raise NodeUnavailable("no cgroup hierarchy under /sys/fs/cgroup for the kubelet")


def node_address() -> str:
    """The IPv4 address of the interface that holds the default route (the node's InternalIP)."""
    routes = json.loads(
        subprocess.run(
            ["ip", "-j", "-4", "route", "show", "default"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout or "[]"
    )  # fmt: skip
    if not routes:
        raise NodeUnavailable("no default route: the node needs an address beyond loopback")
    device = routes[0]["dev"]
    addresses = json.loads(
        subprocess.run(
            ["ip", "-j", "-4", "addr", "show", "dev", device],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout
    )  # fmt: skip
    for interface in addresses:
        for address in interface.get("addr_info", []):
            return str(address["local"])
    raise NodeUnavailable(f"interface {device} has no IPv4 address")


def node_name() -> str:
    """The host name as a valid Kubernetes node name (lower case)."""
    return socket.gethostname().split(".")[0].lower() or "scrapeq-node"


def running_node() -> NodeRecord | None:
    """The record of the node running on this machine, or None (a stale record is ignored)."""
    record = _read_record()
    if record is not None and any(pid_alive(int(pid)) for pid in record["pids"].values()):
        return record
    return None


def _read_record() -> NodeRecord | None:
    try:
        record: NodeRecord = json.loads(RECORD.read_text())
    except (OSError, ValueError):
        return None
    return record


def clean_leftovers() -> None:
    """Undo what a node did to the host, whether it stopped properly or not: kill what runs in
    its pods' cgroups and its containerd shims, unmount its mounts, delete its network
    namespaces, bridge, iptables chains and cgroups, restore the sysctls it changed and remove
    the fixed paths the kubelet created. Safe to call when nothing is left."""
    record = _read_record()
    roots = [RECORD_DIR, CONTAINERD_ROOT]
    if record is not None:
        for pid in record["pids"].values():
            terminate_pid(int(pid), grace=5)
        roots.append(Path(record["state_dir"]))
    _kill_pod_processes()
    _kill_shims()
    _unmount_below(roots)
    _delete_network_namespaces()
    subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False, timeout=10)
    _drop_iptables_chains()
    _remove_pod_cgroups()
    settings_file = RECORD_DIR / "host-settings.json"
    if settings_file.exists():
        settings = json.loads(settings_file.read_text())
        for name, value in settings["sysctls"].items():
            with contextlib.suppress(OSError):
                (Path("/proc/sys") / name).write_text(value + "\n")
        for created in settings["created_paths"]:
            shutil.rmtree(created, ignore_errors=True)
    shutil.rmtree(RECORD_DIR, ignore_errors=True)


def _kill_pod_processes() -> None:
    for hierarchy in _pod_cgroups():
        for procs in hierarchy.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                for line in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(line), signal.SIGKILL)


def _kill_shims() -> None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            command = (entry / "cmdline").read_bytes().split(b"\0")
            if (
                command
                and command[0].endswith(b"containerd-shim-runc-v2")
                and any(str(CONTAINERD_SOCKET).encode() in part for part in command)
            ):
                os.kill(int(entry.name), signal.SIGKILL)


def _pod_cgroups() -> list[Path]:
    root = Path("/sys/fs/cgroup")
    candidates = [root / "kubepods"] + [child / "kubepods" for child in root.iterdir()]
    return [path for path in candidates if path.is_dir()]


def _remove_pod_cgroups() -> None:
    for hierarchy in _pod_cgroups():
        directories = sorted(
            (path for path in hierarchy.rglob("*") if path.is_dir()),
            key=lambda path: len(path.parts),
            reverse=True,
        )
        for directory in [*directories, hierarchy]:
            with contextlib.suppress(OSError):
                directory.rmdir()


def _unmount_below(roots: Iterable[Path]) -> None:
    prefixes = [str(root.resolve()) + "/" for root in roots] + [
        "/run/netns/cni-",
        "/var/run/netns/cni-",
    ]
    mounts = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            mount_point = line.split()[4].encode().decode("unicode_escape")
            if any(mount_point.startswith(prefix) for prefix in prefixes):
                mounts.append(mount_point)
    # Deepest first, so that nothing is unmounted from under another mount.
    for mount_point in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", mount_point], capture_output=True, check=False, timeout=10)


def _delete_network_namespaces() -> None:
    for directory in (Path("/run/netns"), Path("/var/run/netns")):
        if not directory.is_dir():
            continue
        for namespace in directory.glob("cni-*"):
            subprocess.run(
                ["ip", "netns", "delete", namespace.name],
                capture_output=True, check=False, timeout=10,
            )  # fmt: skip
            with contextlib.suppress(OSError):
                namespace.unlink()


def _drop_iptables_chains() -> None:
    """Remove every KUBE-* and CNI-* chain and every rule that jumps to one, leaving other
    rules (the machine's own, podman's) as they were: each table is saved, filtered and
    restored in one step."""
    for save, restore in (
        ("iptables-save", "iptables-restore"),
        ("ip6tables-save", "ip6tables-restore"),
    ):
        if shutil.which(save) is None:
            continue
        saved = subprocess.run([save], capture_output=True, text=True, check=False, timeout=30)
        if saved.returncode != 0:
            continue
        kept = [
            line
            for line in saved.stdout.splitlines()
            if not any(marker in line for marker in ("KUBE-", "CNI-", "kubernetes"))
        ]
        if kept != saved.stdout.splitlines():
            subprocess.run(
                [restore], input="\n".join(kept) + "\n", text=True, capture_output=True,
                check=False, timeout=30,
            )  # fmt: skip


def _running_sandboxes() -> bool:
    try:
        result = subprocess.run(
            ["ctr", f"--address={CONTAINERD_SOCKET}", "-n", "k8s.io", "tasks", "ls", "-q"],
            capture_output=True, text=True, check=False, timeout=10,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return False  # containerd does not answer: nothing to wait for
    return result.returncode == 0 and bool(result.stdout.strip())


def _ctr_answers(address: Path) -> bool:
    result = subprocess.run(
        ["ctr", f"--address={address}", "version"],
        capture_output=True, check=False, timeout=10,
    )  # fmt: skip
    return result.returncode == 0


def dns_lookup(server: str, name: str, *, timeout: float = 1.0) -> str | None:
    """Ask `server` for the A record of `name` over UDP; the first address, or None."""
    query = struct.pack(">HHHHHH", 0x5351, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        query += bytes([len(label)]) + label.encode()
    query += b"\0" + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.sendto(query, (server, 53))
            answer, _ = sock.recvfrom(4096)
        except OSError:
            return None
    answers = struct.unpack(">H", answer[6:8])[0]
    if answer[:2] != query[:2] or answers == 0:
        return None
    # Skip the header and the question, then read answers until an A record.
    offset = len(query)
    for _ in range(answers):
        if answer[offset] & 0xC0 == 0xC0:
            offset += 2
        else:
            while answer[offset]:
                offset += answer[offset] + 1
            offset += 1
        record_type, _, _, length = struct.unpack(">HHIH", answer[offset : offset + 10])
        offset += 10
        if record_type == 1 and length == 4:
            return socket.inet_ntoa(answer[offset : offset + 4])
        offset += length
    return None

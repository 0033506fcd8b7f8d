"""The workers' NetworkPolicy as the real helm binary renders it: DNS only to the cluster DNS,
PostgreSQL only to the database, the public internet on 80/443, and nothing else.

No NetworkPolicy enforcer runs here (the local node's bridge plugin enforces none), so these
tests read the rendered policy with the rules of the NetworkPolicy API (a connection is allowed
when one egress rule's peers and ports both match; peers of one rule are ORed, a peer's
namespaceSelector and podSelector are ANDed, no namespaceSelector means the policy's own
namespace) and ask it about concrete destinations.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.helm_chart import CHART, STABLE_PASSWORD, Manifest, of_kind, render, render_error

pytestmark = [pytest.mark.helm, pytest.mark.timeout(120)]

NAMESPACE = "scrapeq-system"
KUBE_DNS_POD = {"k8s-app": "kube-dns"}
KUBE_SYSTEM = {"kubernetes.io/metadata.name": "kube-system"}
POLICY_ON = {"networkPolicy": {"enabled": True}}


@dataclass(frozen=True)
class Destination:
    """Where a worker connects: a pod (its labels and its namespace's labels) or an address."""

    port: int
    protocol: str = "TCP"
    address: str | None = None
    pod_labels: dict[str, str] = field(default_factory=dict)
    namespace_labels: dict[str, str] = field(default_factory=dict)


def pod(labels: dict[str, str], namespace: str, port: int, protocol: str = "TCP") -> Destination:
    return Destination(
        port=port,
        protocol=protocol,
        pod_labels=labels,
        namespace_labels={"kubernetes.io/metadata.name": namespace},
    )


def address(ip: str, port: int, protocol: str = "TCP") -> Destination:
    return Destination(port=port, protocol=protocol, address=ip)


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, f"selector form not read by this test: {selector}"
    return all(labels.get(key) == value for key, value in selector.get("matchLabels", {}).items())


def _peer_matches(peer: dict[str, Any], destination: Destination) -> bool:
    if "ipBlock" in peer:
        if destination.address is None:
            return False  # pods are matched by selectors here, not by their addresses
        ip = ipaddress.ip_address(destination.address)
        block = peer["ipBlock"]
        return ip in ipaddress.ip_network(block["cidr"]) and not any(
            ip in ipaddress.ip_network(excepted) for excepted in block.get("except", [])
        )
    if destination.address is not None:
        return False
    if "namespaceSelector" in peer:
        in_namespace = _selects(peer["namespaceSelector"], destination.namespace_labels)
    else:
        in_namespace = destination.namespace_labels == {"kubernetes.io/metadata.name": NAMESPACE}
    return in_namespace and _selects(peer.get("podSelector", {}), destination.pod_labels)


def allows(policy: Manifest, destination: Destination) -> bool:
    """Whether the egress policy lets a selected pod connect to `destination`."""
    for rule in policy["spec"]["egress"]:
        peers = rule.get("to")
        ports = rule.get("ports")
        peer_ok = peers is None or any(_peer_matches(peer, destination) for peer in peers)
        port_ok = ports is None or any(
            entry["port"] == destination.port
            and entry.get("protocol", "TCP") == destination.protocol
            for entry in ports
        )
        if peer_ok and port_ok:
            return True
    return False


def worker_policy(helm_binary: Path, values: dict[str, Any]) -> Manifest:
    manifests = render(helm_binary, values, namespace=NAMESPACE)
    (policy,) = of_kind(manifests, "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Egress"]
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "worker"
    return policy


def database_pod_labels(manifests: list[Manifest]) -> dict[str, str]:
    (statefulset,) = of_kind(manifests, "StatefulSet")
    labels: dict[str, str] = statefulset["spec"]["template"]["metadata"]["labels"]
    return labels


def test_dns_goes_only_to_the_cluster_dns_pods(helm_binary: Path) -> None:
    policy = worker_policy(helm_binary, {**STABLE_PASSWORD, **POLICY_ON})
    for protocol in ("UDP", "TCP"):
        assert allows(policy, pod(KUBE_DNS_POD, "kube-system", 53, protocol))
        # Port 53 of anything else: another namespace's pod, an internal or a public address.
        assert not allows(policy, pod(KUBE_DNS_POD, "shop", 53, protocol))
        assert not allows(policy, pod({"app": "anything"}, "kube-system", 53, protocol))
        assert not allows(policy, address("10.1.2.3", 53, protocol))
        assert not allows(policy, address("8.8.8.8", 53, protocol))
        assert not allows(policy, address("fd00::53", 53, protocol))
    # The DNS peers allow DNS only, not other ports.
    assert not allows(policy, pod(KUBE_DNS_POD, "kube-system", 9153))


def test_postgresql_goes_only_to_the_bundled_database_pods(helm_binary: Path) -> None:
    values = {**STABLE_PASSWORD, **POLICY_ON}
    manifests = render(helm_binary, values, namespace=NAMESPACE)
    policy = worker_policy(helm_binary, values)
    database = database_pod_labels(manifests)

    assert allows(policy, pod(database, NAMESPACE, 5432))
    assert not allows(policy, pod(database, "shop", 5432))
    assert not allows(policy, pod({"app": "someone-elses-postgres"}, NAMESPACE, 5432))
    assert not allows(policy, address("10.1.2.3", 5432))
    assert not allows(policy, address("93.184.216.34", 5432))
    assert not allows(policy, address("fd00::5432", 5432))


def test_an_external_database_is_reachable_only_at_its_configured_address(
    helm_binary: Path,
) -> None:
    values = {
        "database": {"existingSecret": {"name": "db"}, "bundled": {"enabled": False}},
        "networkPolicy": {
            "enabled": True,
            "database": {"to": [{"ipBlock": {"cidr": "10.20.0.5/32"}}], "port": 6432},
        },
    }
    policy = worker_policy(helm_binary, values)
    assert allows(policy, address("10.20.0.5", 6432))
    assert not allows(policy, address("10.20.0.6", 6432))
    assert not allows(policy, address("10.20.0.5", 5432))


def test_an_external_database_without_a_destination_is_refused_with_a_message(
    helm_binary: Path,
) -> None:
    values = {
        "database": {"existingSecret": {"name": "db"}, "bundled": {"enabled": False}},
        **POLICY_ON,
    }
    assert "networkPolicy.database.to is empty" in render_error(helm_binary, values)


def test_web_traffic_reaches_only_public_addresses_on_80_and_443(helm_binary: Path) -> None:
    policy = worker_policy(helm_binary, {**STABLE_PASSWORD, **POLICY_ON})
    assert allows(policy, address("93.184.216.34", 443))
    assert allows(policy, address("93.184.216.34", 80))
    assert not allows(policy, address("93.184.216.34", 8080))
    for internal in ("10.0.0.1", "172.16.0.1", "192.168.1.1", "127.0.0.1", "169.254.169.254"):
        assert not allows(policy, address(internal, 443)), internal
    assert not allows(policy, address("2606:2800:220:1::1", 443))  # no IPv6 rule
    assert not allows(policy, address("fd00::1", 443))


def test_the_local_values_with_the_policy_on_still_reach_their_dns_database_and_sites(
    helm_binary: Path,
) -> None:
    """values-local.yaml (what the node tests and the demo install) leaves the policy off; a
    user turning it on there names the node's DNS, a process on the host's address (docs/chart.md)
    — with that, the node tests' DNS, database and test sites stay reachable."""
    local = yaml.safe_load((CHART / "values-local.yaml").read_text())
    assert not local.get("networkPolicy", {}).get("enabled", False)
    node_dns = "192.0.2.7"  # the host's address; any one stands for it here
    values = {
        **local,
        "networkPolicy": {
            "enabled": True,
            "dns": {"to": [{"ipBlock": {"cidr": f"{node_dns}/32"}}]},
            "extraEgressCIDRs": local["workers"]["allowNetworks"],
        },
    }
    manifests = render(helm_binary, {**values, **STABLE_PASSWORD}, namespace=NAMESPACE)
    (policy,) = of_kind(manifests, "NetworkPolicy")
    assert allows(policy, address(node_dns, 53, "UDP"))
    assert allows(policy, address(node_dns, 53, "TCP"))
    assert allows(policy, pod(database_pod_labels(manifests), NAMESPACE, 5432))
    assert allows(policy, address("10.244.0.1", 8000))  # the node's pod-network test sites
    assert allows(policy, address("10.96.0.20", 80))  # test sites as Services
    assert not allows(policy, address("192.0.2.8", 53, "UDP"))

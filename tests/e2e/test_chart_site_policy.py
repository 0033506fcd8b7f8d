"""The chart's site policy, rendered by the real helm binary: both CRDs, a default SitePolicy
for every site from values (a post-install/post-upgrade hook, so that its CRD exists first),
and read-only RBAC on SitePolicies bound cluster-wide whatever watchNamespaces says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helm_chart import Manifest, find, of_kind, render, render_error
from tests.e2e.test_chart_values import with_password

pytestmark = [pytest.mark.helm, pytest.mark.timeout(120)]


def rendered(helm_binary: Path, values: dict[str, Any]) -> list[Manifest]:
    return render(helm_binary, with_password(values))


def test_the_chart_installs_its_crds_and_a_default_policy_for_every_site_after_them(
    helm_binary: Path,
) -> None:
    manifests = rendered(helm_binary, {})
    crds = {crd["metadata"]["name"] for crd in of_kind(manifests, "CustomResourceDefinition")}
    assert crds == {"scrapejobs.scrapeq.io", "sitepolicies.scrapeq.io", "queuepolicies.scrapeq.io"}
    policy = find(manifests, "SitePolicy", "scrapeq-default")
    assert policy["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    # Nothing set: the pools' defaults and each job's own settings hold.
    assert policy["spec"] == {"sites": ["*"], "namespaces": {"deny": []}}


def test_the_default_policy_takes_its_settings_from_values(helm_binary: Path) -> None:
    values = {
        "sitePolicy": {
            "maxConcurrentPerSite": 4,
            "delaySeconds": 0.5,
            "respectRobotsTxt": True,
            "userAgent": "scrapeq (+https://crawler.example.net)",
            "contact": "crawler@example.net",
            "namespaces": {"allow": ["shop"], "deny": ["sandbox"]},
        }
    }
    policy = find(rendered(helm_binary, values), "SitePolicy", "scrapeq-default")
    assert policy["spec"] == {
        "sites": ["*"],
        "maxConcurrentPerSite": 4,
        "delaySeconds": 0.5,
        "respectRobotsTxt": True,
        "userAgent": "scrapeq (+https://crawler.example.net)",
        "contact": "crawler@example.net",
        "namespaces": {"allow": ["shop"], "deny": ["sandbox"]},
    }
    assert not of_kind(rendered(helm_binary, {"sitePolicy": {"install": False}}), "SitePolicy")


def test_a_default_policy_beyond_the_bounds_is_refused_by_the_values_schema(
    helm_binary: Path,
) -> None:
    error = render_error(helm_binary, with_password({"sitePolicy": {"maxConcurrentPerSite": 0}}))
    assert "maxConcurrentPerSite" in error


@pytest.mark.parametrize("watch", [[], ["shop"]], ids=["cluster-wide", "namespaced"])
def test_the_operator_reads_site_policies_cluster_wide_and_nothing_more(
    helm_binary: Path, watch: list[str]
) -> None:
    manifests = rendered(helm_binary, {"operator": {"watchNamespaces": watch}})
    role = find(manifests, "ClusterRole", "scrapeq-operator-site-policies")
    assert role["rules"] == [
        {
            "apiGroups": ["scrapeq.io"],
            "resources": ["sitepolicies"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    binding = find(manifests, "ClusterRoleBinding", "scrapeq-operator-site-policies")
    assert binding["roleRef"]["name"] == "scrapeq-operator-site-policies"
    assert binding["subjects"][0]["name"] == "scrapeq-operator"

"""Site policies on the real parts (kube-apiserver, PostgreSQL, the operator process): a
SitePolicy applied with kubectl takes effect in PostgreSQL (the site's limit and delay the claim
reads), a change, an adaptive limit and a deletion follow, a policy adaptive without a limit is
refused at apply time, and a ScrapeJob whose start URL's site refuses its
namespace gets Ready=False (SiteNotAllowed) naming the policy until the policy lets it run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import scrapeq_queue

from tests.e2e.operator.operator_parts import (
    Kubectl,
    OperatorProcess,
    owner_progress,
    run_queue_call,
    scrapejob,
    wait_for_status,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres]


def site_policy(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scrapeq.io/v1alpha1",
        "kind": "SitePolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def site_rule(database_url: str, site: str) -> scrapeq_queue.SiteRule:
    rules = run_queue_call(database_url, lambda conn: scrapeq_queue.site_rules(conn, [site]))
    return rules[site]


@pytest.mark.timeout(120)
def test_a_policy_applied_with_kubectl_sets_a_sites_limit_in_postgresql(
    kubectl: Kubectl,
    namespace: str,
    database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    policy = f"gentle-{namespace}"
    site = f"{namespace}.example"
    operator_factory(database_url)
    job = scrapejob("shop", urls=[f"https://www.{site}/a", f"https://{site}/b"])
    job["metadata"]["namespace"] = namespace
    kubectl.create(job)
    wait_for_status(
        kubectl, namespace, "shop", lambda status: status.get("total") == 2, what="rows queued"
    )
    kubectl.apply(site_policy(policy, sites=[site], maxConcurrentPerSite=1, delaySeconds=2))

    def state() -> tuple[int | None, float | None]:
        states = run_queue_call(database_url, lambda conn: scrapeq_queue.site_states(conn, [site]))
        return (states[site].max_in_flight, states[site].delay_seconds)

    eventually_blocking(
        lambda: state() == (1, 2.0), within=30, what="the policy in the site's state"
    )
    assert site_rule(database_url, site).policies == (policy,)

    kubectl.apply(site_policy(policy, sites=[site], maxConcurrentPerSite=3))
    eventually_blocking(lambda: state() == (3, None), within=30, what="the changed policy")

    # Adaptive: the limit starts at 2 and may grow to the policy's 3.
    kubectl.apply(
        site_policy(policy, sites=[site], maxConcurrentPerSite=3, adaptiveConcurrency=True)
    )
    eventually_blocking(lambda: state() == (2, None), within=30, what="the adaptive limit")
    states = run_queue_call(database_url, lambda conn: scrapeq_queue.site_states(conn, [site]))
    assert (states[site].adaptive_ceiling, states[site].adaptive_limit) == (3, 2.0)
    # Adaptive without a limit to grow to is refused at apply time, and changes nothing.
    refused = kubectl.apply(
        site_policy(policy, sites=[site], adaptiveConcurrency=True), check=False
    )
    assert refused.returncode != 0
    assert "adaptiveConcurrency needs maxConcurrentPerSite" in refused.stderr
    assert state() == (2, None)

    kubectl.run("delete", "sitepolicy", policy)
    eventually_blocking(lambda: state() == (None, None), within=30, what="the policy gone")


@pytest.mark.timeout(120)
def test_a_job_whose_site_refuses_its_namespace_is_told_which_policy_until_it_may_run(
    kubectl: Kubectl,
    namespace: str,
    database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    policy = f"no-bank-{namespace}"
    site = f"bank-{namespace}.example"
    kubectl.apply(site_policy(policy, sites=[site], namespaces={"deny": [namespace]}))
    operator_factory(database_url)
    eventually_blocking(
        lambda: site_rule(database_url, site).pattern == site,
        within=30,
        what="the policy synced into PostgreSQL",
    )
    job = scrapejob("vault", url=f"https://www.{site}/accounts")
    job["metadata"]["namespace"] = namespace
    kubectl.create(job)

    status = wait_for_status(
        kubectl,
        namespace,
        "vault",
        lambda status: status.get("reason") == "SiteNotAllowed",
        what="the job refused by the site policy",
    )
    assert (
        f"site policy {policy} does not let namespace {namespace} crawl {site}"
        in (status["message"])
    )
    uid = kubectl.get("scrapejob", "vault", namespace)["metadata"]["uid"]
    assert owner_progress(database_url, uid).total == 0

    kubectl.run("delete", "sitepolicy", policy)
    wait_for_status(
        kubectl, namespace, "vault", lambda status: status.get("total") == 1, what="rows queued"
    )


@pytest.mark.timeout(120)
def test_a_policy_deleted_while_no_operator_ran_is_removed_when_one_starts(
    kubectl: Kubectl,
    namespace: str,
    database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    gone, kept = f"gone-{namespace}", f"kept-{namespace}"
    site, other = f"{namespace}.example", f"other-{namespace}.example"
    kubectl.apply(site_policy(gone, sites=[site], maxConcurrentPerSite=1))
    kubectl.apply(site_policy(kept, sites=[other], maxConcurrentPerSite=2))
    first = operator_factory(database_url)
    eventually_blocking(
        lambda: (
            (site_rule(database_url, site).policies, site_rule(database_url, other).policies)
            == ((gone,), (kept,))
        ),
        within=30,
        what="both policies synced into PostgreSQL",
    )
    first.stop()

    kubectl.run("delete", "sitepolicy", gone)
    operator_factory(database_url)

    eventually_blocking(
        lambda: site_rule(database_url, site).policies == (),
        within=30,
        what="the deleted policy gone from PostgreSQL",
    )
    assert site_rule(database_url, other).policies == (kept,)
    kubectl.run("delete", "sitepolicy", kept)

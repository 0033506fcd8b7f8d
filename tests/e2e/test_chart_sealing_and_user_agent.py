"""Chart values for what the workers send: the User-Agent's contact URL, the upstream proxy
(from a Secret, per pool), and the key ring that seals ScrapeJob credentials (env
SCRAPEQ_SEALING_KEY of the operator and of every pool),
rendered by the real helm binary. The generated key that `helm install` makes and `helm upgrade`
keeps is covered by test_chart.py's install test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scrapeq_queue.payload import BlockMarker, parse_block_markers
from scrapeq_worker.settings import settings_from

from tests.e2e.helm_chart import Manifest, find, of_kind, render_error
from tests.e2e.test_chart_values import pod_spec, rendered

pytestmark = [pytest.mark.helm, pytest.mark.timeout(120)]

KEY = "q9p4V7d1bJ0oQm4mX6m8Jm0Zl0m2Qz8f0q2wS9tYk1E="
TWO_POOLS: dict[str, Any] = {
    "pools": [
        {"name": "default", "queues": ["default"]},
        {"name": "shop", "queues": ["shop"]},
    ]
}


def env_of(workload: Manifest) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = pod_spec(workload)["containers"][0]["env"]
    return env


def named(env: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [variable for variable in env if variable["name"] == name]


def test_the_user_agent_contact_goes_to_every_pool(helm_binary: Path) -> None:
    values = {"workers": {**TWO_POOLS, "userAgentContact": "https://crawler.example.org/about"}}
    manifests = rendered(helm_binary, values)
    pools = [d for d in of_kind(manifests, "Deployment") if "worker" in d["metadata"]["name"]]
    assert len(pools) == 2
    for pool in pools:
        assert named(env_of(pool), "SCRAPEQ_USER_AGENT_CONTACT") == [
            {"name": "SCRAPEQ_USER_AGENT_CONTACT", "value": "https://crawler.example.org/about"}
        ]
    operator = find(manifests, "Deployment", "scrapeq-operator")
    assert named(env_of(operator), "SCRAPEQ_USER_AGENT_CONTACT") == []


def test_a_pools_own_contact_replaces_the_workers_wide_one(helm_binary: Path) -> None:
    values = {
        "workers": {
            "userAgentContact": "https://crawler.example.org/about",
            "pools": [
                {"name": "default", "queues": ["default"]},
                {
                    "name": "research",
                    "queues": ["research"],
                    "userAgentContact": "https://research.example.org/bot",
                },
                {"name": "quiet", "queues": ["quiet"], "userAgentContact": ""},
            ],
        }
    }
    manifests = rendered(helm_binary, values)
    expected = {
        "default": ["https://crawler.example.org/about"],
        "research": ["https://research.example.org/bot"],
        "quiet": [],
    }
    for pool, contacts in expected.items():
        workload = find(manifests, "Deployment", f"scrapeq-worker-{pool}")
        assert named(env_of(workload), "SCRAPEQ_USER_AGENT_CONTACT") == [
            {"name": "SCRAPEQ_USER_AGENT_CONTACT", "value": contact} for contact in contacts
        ]


def test_a_pools_bad_contact_url_is_refused_by_the_chart_schema(helm_binary: Path) -> None:
    pool = {"name": "default", "queues": ["default"], "userAgentContact": "mailto:ops@x.org"}
    error = render_error(
        helm_binary,
        {"workers": {"pools": [pool]}, "database": {"bundled": {"password": "p"}}},
    )
    assert "userAgentContact" in error
    assert "does not match pattern" in error


def test_a_pools_block_resources_replace_the_workers_wide_list(helm_binary: Path) -> None:
    values = {
        "workers": {
            "blockResources": ["image", "font"],
            "pools": [
                {"name": "default", "queues": ["default"]},
                {"name": "media", "queues": ["media"], "blockResources": ["media"]},
                {"name": "full", "queues": ["full"], "blockResources": []},
            ],
        }
    }
    manifests = rendered(helm_binary, values)
    expected = {"default": "image,font", "media": "media", "full": ""}
    for pool, value in expected.items():
        workload = find(manifests, "Deployment", f"scrapeq-worker-{pool}")
        assert named(env_of(workload), "SCRAPEQ_BLOCK_RESOURCES") == [
            {"name": "SCRAPEQ_BLOCK_RESOURCES", "value": value}
        ]


def test_the_workers_block_markers_reach_every_pool_as_json(helm_binary: Path) -> None:
    markers = [{"selector": "#challenge"}, {"selector": "title", "text": "Just a moment"}]
    manifests = rendered(helm_binary, {"workers": {"blockMarkers": markers}})
    workload = find(manifests, "Deployment", "scrapeq-worker-default")
    [variable] = named(env_of(workload), "SCRAPEQ_BLOCK_MARKERS")
    assert parse_block_markers(variable["value"]) == (
        BlockMarker("#challenge"),
        BlockMarker("title", "Just a moment"),
    )


def test_a_block_marker_without_a_selector_is_refused_by_the_chart_schema(
    helm_binary: Path,
) -> None:
    error = render_error(helm_binary, {"workers": {"blockMarkers": [{"text": "x"}]}})
    assert "blockMarkers" in error


def test_an_unknown_resource_kind_is_refused_by_the_chart_schema(helm_binary: Path) -> None:
    error = render_error(helm_binary, {"workers": {"blockResources": ["script"]}})
    assert "blockResources" in error
    assert "must be one of" in error


def test_without_a_contact_the_workers_get_no_contact_variable(helm_binary: Path) -> None:
    pool = find(rendered(helm_binary, {}), "Deployment", "scrapeq-worker-default")
    assert named(env_of(pool), "SCRAPEQ_USER_AGENT_CONTACT") == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"workers": {"userAgentContact": "mailto:ops@example.org"}}, "does not match pattern"),
        ({"workers": {"userAgentContact": "https://x.example/a b"}}, "does not match pattern"),
        ({"workers": {"userAgentContact": "https:///about"}}, "does not match pattern"),
        ({"credentials": {"sealingKey": {"value": "short"}}}, "does not match pattern"),
        ({"credentials": {"sealingKey": {"secret": "x"}}}, "'secret' not allowed"),
    ],
    ids=["not-http", "space", "no-host", "short-key", "typo"],
)
def test_the_schema_rejects_a_bad_contact_url_or_sealing_key(
    helm_binary: Path, values: dict[str, Any], message: str
) -> None:
    error = render_error(helm_binary, {**values, "database": {"bundled": {"password": "p"}}})
    assert "values don't meet the specifications of the schema" in error
    assert message in error, error


def test_a_sealing_key_value_is_rendered_into_a_kept_secret_read_by_the_operator_and_the_pools(
    helm_binary: Path,
) -> None:
    values = {"workers": TWO_POOLS, "credentials": {"sealingKey": {"value": KEY}}}
    first, second = (rendered(helm_binary, values) for _ in range(2))
    secret = find(first, "Secret", "scrapeq-sealing-key")
    assert secret == find(second, "Secret", "scrapeq-sealing-key")
    assert secret["stringData"] == {"SCRAPEQ_SEALING_KEY": KEY}
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    reference = {
        "secretKeyRef": {
            "name": "scrapeq-sealing-key",
            "key": "SCRAPEQ_SEALING_KEY",
            "optional": True,
        }
    }
    workloads = of_kind(first, "Deployment")
    assert len(workloads) == 3
    for workload in workloads:
        assert named(env_of(workload), "SCRAPEQ_SEALING_KEY") == [
            {"name": "SCRAPEQ_SEALING_KEY", "valueFrom": reference}
        ]


def test_an_existing_sealing_key_secret_replaces_the_charts_own(helm_binary: Path) -> None:
    values = {"credentials": {"sealingKey": {"existingSecret": {"name": "ring", "key": "keys"}}}}
    manifests = rendered(helm_binary, values)
    assert [s["metadata"]["name"] for s in of_kind(manifests, "Secret")] == ["scrapeq-database"]
    for workload in of_kind(manifests, "Deployment"):
        assert named(env_of(workload), "SCRAPEQ_SEALING_KEY") == [
            {
                "name": "SCRAPEQ_SEALING_KEY",
                "valueFrom": {"secretKeyRef": {"name": "ring", "key": "keys", "optional": True}},
            }
        ]


def test_helm_template_without_a_key_renders_none_rather_than_a_new_one_each_time(
    helm_binary: Path,
) -> None:
    manifests = rendered(helm_binary, {})
    assert [s["metadata"]["name"] for s in of_kind(manifests, "Secret")] == ["scrapeq-database"]
    for workload in of_kind(manifests, "Deployment"):
        assert named(env_of(workload), "SCRAPEQ_SEALING_KEY") == []


def test_the_upstream_proxy_comes_from_a_secret_and_a_pool_may_set_its_own(
    helm_binary: Path,
) -> None:
    values = {
        "workers": {
            "upstreamProxy": {"existingSecret": {"name": "pool-proxy"}},
            "pools": [
                {"name": "default", "queues": ["default"]},
                {"name": "direct", "queues": ["d"], "upstreamProxy": {"existingSecret": {}}},
                {
                    "name": "other",
                    "queues": ["o"],
                    "upstreamProxy": {"existingSecret": {"name": "other-proxy", "key": "url"}},
                },
            ],
        }
    }
    manifests = rendered(helm_binary, values)

    def upstream_of(pool: str) -> list[dict[str, Any]]:
        deployment = find(manifests, "Deployment", f"scrapeq-worker-{pool}")
        return named(env_of(deployment), "SCRAPEQ_UPSTREAM_PROXY")

    def from_secret(name: str, key: str) -> list[dict[str, Any]]:
        reference = {"secretKeyRef": {"name": name, "key": key}}
        return [{"name": "SCRAPEQ_UPSTREAM_PROXY", "valueFrom": reference}]

    assert upstream_of("default") == from_secret("pool-proxy", "SCRAPEQ_UPSTREAM_PROXY")
    assert upstream_of("direct") == []
    assert upstream_of("other") == from_secret("other-proxy", "url")
    # Never a plain value: the URL holds the proxy's credentials.
    assert "value" not in upstream_of("default")[0]
    operator = find(manifests, "Deployment", "scrapeq-operator")
    assert named(env_of(operator), "SCRAPEQ_UPSTREAM_PROXY") == []


def test_without_an_upstream_proxy_the_workers_get_no_proxy_variable(helm_binary: Path) -> None:
    pool = find(rendered(helm_binary, {}), "Deployment", "scrapeq-worker-default")
    assert named(env_of(pool), "SCRAPEQ_UPSTREAM_PROXY") == []


def test_the_session_pool_settings_reach_every_pool_and_parse_as_the_worker_reads_them(
    helm_binary: Path,
) -> None:
    sessions = {"enabled": False, "perRow": 5, "proxyRetireSeconds": 60}
    manifests = rendered(helm_binary, {"workers": {**TWO_POOLS, "sessions": sessions}})
    for name in ("scrapeq-worker-default", "scrapeq-worker-shop"):
        env = {
            variable["name"]: variable["value"]
            for variable in env_of(find(manifests, "Deployment", name))
            if variable["name"].startswith(("SCRAPEQ_SESSION", "SCRAPEQ_PROXY_"))
        }
        settings = settings_from({}, env)
        assert (settings.sessions, settings.sessions_per_row) == (False, 5)
        assert settings.proxy_retire_seconds == 60
        assert settings.session_rules.proxy_failures_in_a_row == 5


def test_a_session_setting_out_of_its_bounds_is_refused_by_the_chart(helm_binary: Path) -> None:
    error = render_error(helm_binary, {"workers": {"sessions": {"perRow": 11}}})
    assert "perRow" in error

"""The API server itself rejects ScrapeJobs that cannot run, with messages a user can act on.

Real kube-apiserver with the CRD from crds/; no operator is needed for any of this.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.operator.operator_parts import REPOSITORY_ROOT, Kubectl, scrapejob

pytestmark = pytest.mark.controlplane


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"url": "ftp://files.example.com/list"}, "must be an http:// or https:// URL"),
        (
            {"urls": ["https://ok.example.com/", "file:///etc/passwd"]},
            "must be an http:// or https:// URL",
        ),
        ({"url": "https://"}, "must be a valid absolute URL with a host name"),
        ({}, "exactly one of spec.url, spec.urls or spec.urlsFrom must be set"),
        (
            {"url": "https://a.example.com/", "urls": ["https://b.example.com/"]},
            "exactly one of spec.url, spec.urls or spec.urlsFrom must be set",
        ),
        (
            {"url": "https://a.example.com/", "retries": {"limit": 99}},
            "spec.retries.limit in body should be less than or equal to 20",
        ),
        ({"url": "https://a.example.com/", "priority": 5000}, "spec.priority"),
        ({"url": "https://a.example.com/", "timeoutSeconds": 0}, "spec.timeoutSeconds"),
        ({"url": "https://a.example.com/", "waitUntil": "whenever"}, "spec.waitUntil"),
        ({"url": "https://a.example.com/", "blockResources": ["script"]}, "spec.blockResources"),
        ({"url": "https://a.example.com/", "blockMarkers": [{"text": "x"}]}, "spec.blockMarkers"),
        (
            {"url": "https://a.example.com/", "blockMarkers": [{"selector": "h1", "text": ""}]},
            "spec.blockMarkers",
        ),
        (
            {"url": "https://a.example.com/", "blockMarkers": [{"selector": "h1"}] * 21},
            "spec.blockMarkers",
        ),
        ({"url": "https://a.example.com/", "parser": "shop product"}, "spec.parser"),
        (
            {"url": "https://a.example.com/", "follow": {"selector": "a", "sameDomain": False}},
            "follow.sameDomain is now follow.sameHost",
        ),
        ({"url": "https://a.example.com/", "parser": "-shop"}, "spec.parser"),
        (
            {"url": "https://a.example.com/", "blockResources": ["image", "image"]},
            "spec.blockResources",
        ),
        ({"url": "https://a.example.com/", "queue": "Not A Queue"}, "spec.queue"),
        ({"url": "https://a.example.com/", "next": {"maxPages": 5}}, "spec.next.selector"),
        (
            {"url": "https://a.example.com/", "follow": {"selector": "a", "label": "detail"}},
            "spec.follow.label must name a route of spec.routes",
        ),
        (
            {
                "url": "https://a.example.com/",
                "follow": {"selector": "a", "label": "detail"},
                "routes": {"detail": {"follow": {"selector": "a", "label": "reviews"}}},
            },
            "a route's follow.label must name a route of spec.routes",
        ),
        (
            {"url": "https://a.example.com/", "routes": {"bad label": {}}},
            "routes labels must be names",
        ),
        (
            {"url": "https://a.example.com/", "next": {"selector": "a", "maxPages": 10_001}},
            "spec.next.maxPages",
        ),
        (
            {"url": "https://a.example.com/", "extract": {"bad name": {"selector": "h1"}}},
            "extract field names must be identifiers",
        ),
        (
            {"urlsFrom": {"configMapKeyRef": {"name": "lists"}}},
            "spec.urlsFrom.configMapKeyRef.key: Required value",
        ),
        (
            {"url": "https://a.example.com/", "schedule": "every five minutes"},
            "schedule must be five cron fields (minute hour day-of-month month day-of-week)",
        ),
        (
            {"url": "https://a.example.com/", "schedule": "*/5 * * *"},
            "schedule must be five cron fields",
        ),
        (
            {"url": "https://a.example.com/", "schedule": "@fortnightly"},
            "schedule must be five cron fields",
        ),
        (
            {"url": "https://a.example.com/", "schedule": "@hourly", "concurrencyPolicy": "Maybe"},
            "spec.concurrencyPolicy",
        ),
        (
            {
                "url": "https://a.example.com/",
                "schedule": "@daily",
                "successfulRunsHistoryLimit": -1,
            },
            "spec.successfulRunsHistoryLimit",
        ),
        (
            {"url": "https://a.example.com/", "concurrencyPolicy": "Allow"},
            "only apply with spec.schedule",
        ),
        (
            {
                "urlsFrom": {
                    "configMapKeyRef": {"name": "lists", "key": "urls"},
                    "scrapeJob": "upstream",
                }
            },
            "exactly one of urlsFrom.configMapKeyRef, urlsFrom.scrapeJob, urlsFrom.sitemap, "
            "urlsFrom.robots or urlsFrom.object must be set",
        ),
        (
            {
                "urlsFrom": {
                    "sitemap": "https://a.example.com/sitemap.xml",
                    "robots": "https://a.example.com/",
                }
            },
            "exactly one of urlsFrom.configMapKeyRef, urlsFrom.scrapeJob, urlsFrom.sitemap, "
            "urlsFrom.robots or urlsFrom.object must be set",
        ),
        ({"urlsFrom": {"sitemap": "ftp://a.example.com/s.xml"}}, "must be an http:// or https://"),
        (
            {"urlsFrom": {"robots": "https://a.example.com/", "lastmodAfter": "yesterday"}},
            "spec.urlsFrom.lastmodAfter",
        ),
        (
            {"urlsFrom": {"scrapeJob": "upstream", "lastmodAfter": "2026-01-01T00:00:00Z"}},
            "urlsFrom.lastmodAfter goes with urlsFrom.sitemap or urlsFrom.robots",
        ),
        (
            {
                "urlsFrom": {
                    "sitemap": "https://a.example.com/s.xml",
                    "changedSincePreviousRun": True,
                }
            },
            "spec.urlsFrom.changedSincePreviousRun needs spec.schedule",
        ),
        ({"urlsFrom": {"object": {"key": "l", "format": "csv"}}}, "spec.urlsFrom.object.format"),
        (
            {"urlsFrom": {"configMapKeyRef": {"name": "l", "key": "u"}, "field": "links"}},
            "urlsFrom.field goes with urlsFrom.scrapeJob",
        ),
        ({"urlsFrom": {"scrapeJob": "invalid"}}, "cannot take its URLs from itself"),
        (
            {"url": "https://a.example.com/", "dependsOn": ["upstream", "invalid"]},
            "a ScrapeJob cannot depend on itself",
        ),
        (
            {"url": "https://a.example.com/", "onDependencyFailure": "Ignore"},
            "spec.onDependencyFailure",
        ),
        (
            {
                "url": "https://a.example.com/",
                "follow": {"selector": "a", "extract": {"bad name": {"selector": "h1"}}},
            },
            "follow.extract field names must be identifiers",
        ),
        (
            {"url": "https://a.example.com/", "follow": {"selector": "a", "maxPages": 0}},
            "spec.follow.maxPages",
        ),
        (
            {"url": "https://a.example.com/", "items": {"selector": "li", "fields": {}}},
            "spec.items.fields",
        ),
        (
            {
                "url": "https://a.example.com/",
                "items": {"selector": "li", "fields": {"a": "b"}, "limit": 10_001},
            },
            "spec.items.limit",
        ),
        (
            {
                "url": "https://a.example.com/",
                "extract": {"a": {"selector": "b", "transforms": [{"type": "eval"}]}},
            },
            "spec.extract.a.transforms[0].type",
        ),
        (
            {
                "url": "https://a.example.com/",
                "items": {"selector": "li", "fields": {"a": {"transforms": [{"type": "regex"}]}}},
            },
            "pattern and group belong to a regex transform, which needs a pattern",
        ),
        (
            {
                "url": "https://a.example.com/",
                "extract": {"a": {"selector": "b", "transforms": [{"type": "trim", "group": 1}]}},
            },
            "pattern and group belong to a regex transform",
        ),
        (
            {"url": "https://a.example.com/", "extract": {"a": {"selector": "b", "xpath": "//b"}}},
            "a field names a selector or an xpath: one of them",
        ),
        (
            {"url": "https://a.example.com/", "extract": {"a": {"attribute": "href"}}},
            "a field names a selector or an xpath: one of them",
        ),
        (
            {
                "url": "https://a.example.com/",
                "items": {"xpath": "//li", "selector": "li", "fields": {"a": {}}},
            },
            "items names a selector or an xpath: one of them",
        ),
        (
            {
                "url": "https://a.example.com/",
                "items": {"xpath": "//li", "fields": {"a": {"xpath": ".", "selector": "b"}}},
            },
            "an item field names a selector or an xpath, not both",
        ),
        (
            {
                "url": "https://a.example.com/",
                "render": False,
                "next": {"selector": "button.next", "click": True},
            },
            "spec.next.click clicks a button on rendered pages only",
        ),
        ({"url": "https://a.example.com/", "structuredData": ["rdfa"]}, "spec.structuredData"),
        (
            {"url": "https://a.example.com/", "structuredData": ["json-ld", "json-ld"]},
            "spec.structuredData",
        ),
        ({"url": "https://a.example.com/", "structuredData": True}, "spec.structuredData"),
    ],
)
def test_an_invalid_scrapejob_is_rejected_with_a_readable_message(
    kubectl: Kubectl, namespace: str, spec: dict[str, Any], message: str
) -> None:
    result = kubectl.create(
        {**scrapejob("invalid", **spec), "metadata": {"name": "invalid", "namespace": namespace}},
        check=False,
    )
    assert result.returncode != 0
    assert message in result.stderr
    assert not kubectl.exists("scrapejob", "invalid", namespace)


def test_a_scheduled_scrapejob_name_leaves_room_for_its_runs_suffix(
    kubectl: Kubectl, namespace: str
) -> None:
    """Runs are named <name>-<10 digits> and labelled with <name>: 52 characters at most."""
    too_long, longest = "s" * 53, "s" * 52
    for name in (too_long, longest):
        manifest = scrapejob(name, url="https://a.example.com/", schedule="@hourly")
        manifest["metadata"]["namespace"] = namespace
        result = kubectl.create(manifest, check=False)
        if name == too_long:
            assert result.returncode != 0
            assert "a scheduled ScrapeJob's name may have at most 52 characters" in result.stderr
        else:
            assert result.returncode == 0, result.stderr
    # The limit is for scheduled ScrapeJobs only.
    unscheduled = scrapejob(too_long, url="https://a.example.com/")
    unscheduled["metadata"]["namespace"] = namespace
    kubectl.create(unscheduled)
    # No operator runs here (no finalizer): delete at once, so that no later cluster-wide
    # operator starts runs for the scheduled one.
    kubectl.run("delete", "scrapejobs", longest, too_long, "-n", namespace, "--wait=false")


def test_a_valid_scrapejob_gets_its_defaults(kubectl: Kubectl, namespace: str) -> None:
    kubectl.create(
        {
            **scrapejob("defaults", url="https://a.example.com/"),
            "metadata": {"name": "defaults", "namespace": namespace},
        }
    )
    spec = kubectl.get("scrapejob", "defaults", namespace)["spec"]
    assert spec["render"] is True
    assert spec["waitUntil"] == "load"
    assert spec["timeoutSeconds"] == 30
    assert spec["retries"] == {"limit": 3, "backoffSeconds": 10}
    assert (spec["queue"], spec["priority"], spec["parser"]) == ("default", 0, "default")


def test_a_scrapejob_with_items_every_transform_and_structured_data_is_accepted(
    kubectl: Kubectl, namespace: str
) -> None:
    transforms = [
        {"type": "trim"},
        {"type": "regex", "pattern": "[0-9.,]+", "group": 0},
        {"type": "price", "decimal": ",", "thousands": ".", "currency": "EUR"},
        {"type": "default", "value": 0},
    ]
    kubectl.create(
        {
            **scrapejob(
                "items",
                url="https://a.example.com/",
                extract={"price": {"selector": ".price", "transforms": transforms}},
                items={
                    "selector": "li.product",
                    "fields": {
                        "link": {
                            "selector": "a",
                            "attribute": "href",
                            "transforms": [{"type": "absoluteUrl"}],
                        },
                        "sku": {"attribute": "data-sku", "transforms": [{"type": "uppercase"}]},
                        "tags": {
                            "selector": "li",
                            "all": True,
                            "transforms": [{"type": "join", "separator": ", "}],
                        },
                        "n": {"transforms": [{"type": "number"}, {"type": "lowercase"}]},
                        "by_xpath": {"xpath": "./h2/text()"},
                    },
                },
            ),
            "metadata": {"name": "items", "namespace": namespace},
        }
    )
    spec = kubectl.get("scrapejob", "items", namespace)["spec"]
    manifest = scrapejob(
        "structured", url="https://a.example.com/", structuredData=["json-ld", "opengraph"]
    )
    manifest["metadata"]["namespace"] = namespace
    kubectl.create(manifest)
    manifest = scrapejob(
        "xpath",
        url="https://a.example.com/",
        extract={"title": {"xpath": "//h1"}},
        items={"xpath": "//li", "fields": {"sku": {"xpath": "@data-sku"}}},
    )
    manifest["metadata"]["namespace"] = namespace
    kubectl.create(manifest)
    assert spec["items"]["limit"] == 1000
    assert spec["extract"]["price"]["transforms"] == transforms


def test_the_spec_of_a_scrapejob_cannot_be_changed(kubectl: Kubectl, namespace: str) -> None:
    kubectl.create(
        {
            **scrapejob("fixed", url="https://a.example.com/"),
            "metadata": {"name": "fixed", "namespace": namespace},
        }
    )
    result = kubectl.run(
        "patch",
        "scrapejob",
        "fixed",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"url": "https://b.example.com/"}}',
        check=False,
    )
    assert result.returncode != 0
    assert "spec is immutable" in result.stderr
    assert kubectl.get("scrapejob", "fixed", namespace)["spec"]["url"] == "https://a.example.com/"


def test_scrapejobs_answer_to_their_short_name_and_category(
    kubectl: Kubectl, namespace: str
) -> None:
    kubectl.create(
        {
            **scrapejob("named", url="https://a.example.com/"),
            "metadata": {"name": "named", "namespace": namespace},
        }
    )
    assert "named" in kubectl.run("get", "sj", "-n", namespace).stdout
    assert "named" in kubectl.run("get", "scrapeq", "-n", namespace).stdout
    explained = " ".join(kubectl.run("explain", "scrapejob.spec.urlsFrom").stdout.split())
    assert "one URL per line" in explained


@pytest.mark.parametrize(
    "example",
    sorted((REPOSITORY_ROOT / "examples").glob("scrapejob-*.yaml")),
    ids=lambda path: path.name,
)
def test_every_example_is_accepted_by_the_api_server(
    kubectl: Kubectl, namespace: str, example: Path
) -> None:
    result = kubectl.run("apply", "--dry-run=server", "-n", namespace, "-f", str(example))
    assert "scrapejob.scrapeq.io" in result.stdout


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"keep": ["html", "dom"]}, "spec.keep[1]: Unsupported value"),
        ({"keep": ["html", "html"]}, "spec.keep[1]: Duplicate value"),
        (
            {"render": False, "keep": ["text", "screenshot"]},
            "spec.keep: screenshot and pdf are taken of rendered pages only",
        ),
        ({"render": False, "keep": ["pdf"]}, "spec.keep: screenshot and pdf"),
    ],
)
def test_a_keep_list_the_worker_could_not_honour_is_refused_at_apply_time(
    kubectl: Kubectl, namespace: str, spec: dict[str, Any], message: str
) -> None:
    result = kubectl.create(
        {
            **scrapejob("keeps", url="https://a.example.com/", **spec),
            "metadata": {"name": "keeps", "namespace": namespace},
        },
        check=False,
    )
    assert result.returncode != 0
    assert message in result.stderr
    assert not kubectl.exists("scrapejob", "keeps", namespace)


def test_html_and_text_of_static_pages_and_every_artifact_of_rendered_ones_are_accepted(
    kubectl: Kubectl, namespace: str
) -> None:
    for name, spec in (
        ("static-keeps", {"render": False, "keep": ["html", "text"]}),
        ("rendered-keeps", {"keep": ["html", "text", "screenshot", "pdf"]}),
    ):
        kubectl.create(
            {
                **scrapejob(name, url="https://a.example.com/", **spec),
                "metadata": {"name": name, "namespace": namespace},
            }
        )
        assert kubectl.get("scrapejob", name, namespace)["spec"]["keep"] == spec["keep"]

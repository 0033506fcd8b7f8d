"""Test helpers for the real node on top of scrapeq.local.release."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from scrapeq.local.release import (  # noqa: F401 - re-exported for the node tests
    Release,
    SitePage,
    install_release,
    pod_network_site,
    pod_ready,
    product_page,
    uninstall_release,
)
from tests.e2e.operator.operator_parts import scrapejob
from tests.waiting import eventually_blocking


def slow_pages(
    slow_prefix: str, seconds: float, until: threading.Event | None = None
) -> Callable[[str], SitePage]:
    """Product pages; those under `slow_prefix` take `seconds` to answer (with `until`: until
    that event is set, `seconds` at most)."""

    def answer(path: str) -> SitePage:
        page = product_page(path)
        if path.startswith(slow_prefix):
            page.delay_seconds = seconds
            page.until = until
        return page

    return answer


def apply_job(release: Release, name: str, urls: list[str], **spec: Any) -> None:
    """Apply a ScrapeJob extracting each page's h1 into the release's namespace."""
    manifest = scrapejob(name, urls=urls, extract={"title": {"selector": "h1"}}, **spec)
    manifest["metadata"]["namespace"] = release.namespace
    release.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))


def delete_job(release: Release, name: str) -> None:
    release.kubectl("delete", "scrapejob", name, "-n", release.namespace, "--wait=true")


def rows_of(release: Release, name: str) -> list[tuple[str, str, str | None]]:
    """(url, status, processed_by) of every row of one ScrapeJob."""
    rows = release.sql(
        "SELECT url_to_scrape, status::text, processed_by FROM scraping_jobs"
        " WHERE owner_name = %s AND owner_namespace = %s",
        name,
        release.namespace,
    )
    return [(row[0], row[1], row[2]) for row in rows]


def completed_attempts(release: Release, name: str) -> dict[str, int]:
    """How many attempts of each URL of one ScrapeJob ended `completed` (exactly 1 is right)."""
    rows = release.sql(
        "SELECT j.url_to_scrape, count(a.job_id) FILTER (WHERE a.outcome = 'completed')"
        " FROM scraping_jobs j LEFT JOIN scrapeq_attempts a ON a.job_id = j.id"
        " WHERE j.owner_name = %s AND j.owner_namespace = %s GROUP BY j.url_to_scrape",
        name,
        release.namespace,
    )
    return {row[0]: int(row[1]) for row in rows}


def succeeded(release: Release, name: str, timeout: float = 300) -> None:
    eventually_blocking(
        lambda: release.scrapejob_status(name).get("phase") == "Succeeded",
        within=timeout,
        what=f"ScrapeJob {name} to succeed",
        every=0.5,
    )


def release_diagnostics(release: Release) -> str:
    """What the release's objects and pods were doing: added to the report of a failed node
    test, since the node and its logs are gone by the time anyone reads it."""
    commands = [
        ("get", "deployments,pods,scrapejobs", "-n", release.namespace, "-o", "wide"),
        ("get", "events", "-n", release.namespace, "--sort-by=.lastTimestamp"),
        ("logs", "-n", release.namespace, f"deployment/{release.component('operator')}",
         "--tail=80", "--timestamps"),
    ]  # fmt: skip
    for pod in release.all_pods("worker"):
        commands.append(
            ("logs", "-n", release.namespace, pod["metadata"]["name"], "--tail=30", "--timestamps")
        )
    parts = []
    for command in commands:
        try:
            result = release.kubectl(*command, check=False)
            output = (result.stdout + result.stderr).strip()
        except subprocess.TimeoutExpired:
            output = "(kubectl timed out)"
        parts.append(f"$ kubectl {' '.join(command)}\n{output}")
    return "\n\n".join(parts)

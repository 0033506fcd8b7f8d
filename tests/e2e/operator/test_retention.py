"""The operator prunes finished rows periodically: completed rows past their retention go,
failed rows are kept like a dead-letter queue (the newest N per queue), recent rows stay; the
politeness state of hosts idle for long goes too.

Real operator process (its retention loop every half second), real PostgreSQL, real
kube-apiserver (the operator needs one to start; retention itself never calls it).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import psycopg
import pytest

from tests.e2e.operator.operator_parts import OperatorProcess
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres]

RETENTION_ENVIRONMENT = {
    "SCRAPEQ_OPERATOR_PRUNE_INTERVAL_SECONDS": "0.5",
    "SCRAPEQ_OPERATOR_RETAIN_COMPLETED_DAYS": "1",
    "SCRAPEQ_OPERATOR_RETAIN_FAILED_LAST": "2",
    "SCRAPEQ_OPERATOR_RETAIN_IDLE_SITES_DAYS": "1",
}

# host -> days since a claim last took its rows (e.test also has the pending row above)
HOSTS = {"idle.test": 2.0, "recent.test": 0.5}

# url -> (status, hours since it finished; None while pending), queue
ROWS = {
    "https://e.test/completed-2-days-ago": ("completed", 48.0, "default"),
    "https://e.test/cancelled-3-days-ago": ("cancelled", 72.0, "default"),
    "https://e.test/completed-an-hour-ago": ("completed", 1.0, "default"),
    "https://e.test/pending": ("pending", None, "default"),
    "https://e.test/failed-1h": ("failed", 1.0, "default"),
    "https://e.test/failed-2h": ("failed", 2.0, "default"),
    "https://e.test/failed-3h": ("failed", 3.0, "default"),
    "https://e.test/failed-4h": ("failed", 4.0, "default"),
    "https://e.test/news-failed-50h": ("failed", 50.0, "news"),
}
KEPT = {
    "https://e.test/completed-an-hour-ago",
    "https://e.test/pending",
    "https://e.test/failed-1h",
    "https://e.test/failed-2h",
    # The only failure of its queue: within that queue's newest 2, however old.
    "https://e.test/news-failed-50h",
}


def remaining_urls(database_url: str) -> set[str]:
    with psycopg.connect(database_url) as connection:
        rows = connection.execute("SELECT url_to_scrape FROM scraping_jobs").fetchall()
    return {row[0] for row in rows}


def known_hosts(database_url: str) -> set[str]:
    with psycopg.connect(database_url) as connection:
        rows = connection.execute("SELECT host_key FROM scrapeq_hosts").fetchall()
    return {row[0] for row in rows}


def pruned_metric(operator: OperatorProcess, what: str) -> float:
    match = re.search(
        rf"^scrapeq_operator_retention_pruned_{what}_total ([0-9.e+]+)$",
        operator.metrics(),
        re.MULTILINE,
    )
    return float(match.group(1)) if match else -1.0


def test_the_operator_prunes_old_finished_rows_and_keeps_recent_ones(
    empty_database_url: str, operator_factory: Callable[..., OperatorProcess]
) -> None:
    # The operator migrates the empty database at start; the rows come after, in one
    # transaction, so every prune sees all of them or none.
    operator = operator_factory(empty_database_url, environment=RETENTION_ENVIRONMENT)
    with psycopg.connect(empty_database_url) as connection:
        for url, (status, hours, queue) in ROWS.items():
            connection.execute(
                "INSERT INTO scraping_jobs (url_to_scrape, parser_type, queue, status,"
                " finished_at) VALUES (%(url)s, 'page', %(queue)s, %(status)s,"
                " now() - make_interval(secs => %(seconds)s))",
                {
                    "url": url,
                    "queue": queue,
                    "status": status,
                    "seconds": None if hours is None else hours * 3600,
                },
            )
        for host, days in HOSTS.items():
            connection.execute(
                "INSERT INTO scrapeq_hosts (host_key, touched_at)"
                " VALUES (%s, now() - make_interval(secs => %s))",
                (host, days * 86400),
            )

    eventually_blocking(
        lambda: remaining_urls(empty_database_url) == KEPT,
        within=30,
        what="the retention loop to delete the rows past retention",
    )
    expected_pruned = len(ROWS) - len(KEPT)
    eventually_blocking(
        lambda: pruned_metric(operator, "jobs") == expected_pruned,
        within=10,
        what=f"scrapeq_operator_retention_pruned_jobs_total to reach {expected_pruned}",
    )
    eventually_blocking(
        lambda: known_hosts(empty_database_url) == {"e.test", "recent.test"},
        within=10,
        what="the retention loop to delete the idle site's state",
    )
    eventually_blocking(
        lambda: pruned_metric(operator, "sites") == 1,
        within=10,
        what="scrapeq_operator_retention_pruned_sites_total to reach 1",
    )
    assert "retention: deleted" in operator.log_tail(200_000)

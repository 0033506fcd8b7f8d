"""The operator prunes finished rows periodically: a ScrapeJob's completed rows past their
retention go, its failed rows are kept like a dead-letter queue (the newest N per queue), recent
rows stay; a classic row a SQL producer inserted stays and stays readable, unless its producer
gave it a retention; rows a sink still waits for stay; the politeness state of hosts idle for
long goes too.

Real operator process (its retention loop every half second), real PostgreSQL, real
kube-apiserver (the operator needs one to start; retention itself never calls it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta

import psycopg
import pytest

from tests.e2e.operator.operator_parts import (
    Kubectl,
    OperatorProcess,
    owner_progress,
    scrapejob,
    work_rows,
)
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

# url -> (status, hours since it finished; None while pending), queue. Every row belongs to a
# ScrapeJob (classic rows are CLASSIC_ROWS below).
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

# url -> (hours since it finished, the producer's retain_for in hours or None, undelivered,
# owned by a ScrapeJob): rows the operator's limits do not decide alone.
CLASSIC_ROWS = {
    "https://e.test/classic-30-days-ago": (24.0 * 30, None, False, False),
    "https://e.test/classic-asked-for-an-hour": (2.0, 1.0, False, False),
    "https://e.test/classic-asked-for-a-week": (48.0, 24.0 * 7, False, False),
    "https://e.test/scrapejob-undelivered-3-days-ago": (72.0, None, True, True),
    "https://e.test/scrapejob-retained-a-month": (48.0, 24.0 * 30, False, True),
}
CLASSIC_KEPT = {
    "https://e.test/classic-30-days-ago",
    "https://e.test/classic-asked-for-a-week",
    "https://e.test/scrapejob-undelivered-3-days-ago",
    "https://e.test/scrapejob-retained-a-month",
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
                " finished_at, owner_uid, owner_namespace, owner_name)"
                " VALUES (%(url)s, 'page', %(queue)s, %(status)s,"
                " now() - make_interval(secs => %(seconds)s), 'uid-1', 'default', 'shop')",
                {
                    "url": url,
                    "queue": queue,
                    "status": status,
                    "seconds": None if hours is None else hours * 3600,
                },
            )
        for url, (hours, retain_hours, undelivered, owned) in CLASSIC_ROWS.items():
            # As a classic producer writes a finished row: status and result, by plain SQL.
            connection.execute(
                "INSERT INTO scraping_jobs (url_to_scrape, parser_type, status, result,"
                " finished_at, retain_for, undelivered, owner_uid, owner_namespace, owner_name)"
                " VALUES (%(url)s, 'product', 'completed', '{\"title\": \"kept\"}',"
                " now() - make_interval(secs => %(seconds)s),"
                " make_interval(secs => %(retain_seconds)s), %(undelivered)s,"
                " %(uid)s, %(namespace)s, %(name)s)",
                {
                    "url": url,
                    "seconds": hours * 3600,
                    "retain_seconds": None if retain_hours is None else retain_hours * 3600,
                    "undelivered": undelivered,
                    "uid": "uid-2" if owned else None,
                    "namespace": "default" if owned else None,
                    "name": "catalogue" if owned else None,
                },
            )
        for host, days in HOSTS.items():
            connection.execute(
                "INSERT INTO scrapeq_hosts (host_key, touched_at)"
                " VALUES (%s, now() - make_interval(secs => %s))",
                (host, days * 86400),
            )

    eventually_blocking(
        lambda: remaining_urls(empty_database_url) == KEPT | CLASSIC_KEPT,
        within=30,
        what="the retention loop to delete the rows past retention",
    )
    expected_pruned = len(ROWS) - len(KEPT) + len(CLASSIC_ROWS) - len(CLASSIC_KEPT)
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
    # The classic row is still readable as its producer wrote it.
    with psycopg.connect(empty_database_url) as connection:
        row = connection.execute(
            "SELECT status::text, result FROM scraping_jobs WHERE url_to_scrape = %s",
            ("https://e.test/classic-30-days-ago",),
        ).fetchone()
    assert row == ("completed", {"title": "kept"})


def backdate_finished(database_url: str, uid: str, days: float) -> None:
    """Date every finished row of the owner `days` back."""
    with psycopg.connect(database_url) as connection:
        connection.execute(
            "UPDATE scraping_jobs SET finished_at = now() - make_interval(secs => %s)"
            " WHERE owner_uid = %s AND finished_at IS NOT NULL",
            (days * 86400, uid),
        )


def insert_sentinel(database_url: str) -> None:
    """A ScrapeJob's row past the default retention: its going shows that a prune pass ran."""
    with psycopg.connect(database_url) as connection:
        connection.execute(
            "INSERT INTO scraping_jobs (url_to_scrape, parser_type, status, finished_at,"
            " owner_uid, owner_namespace, owner_name) VALUES ('https://e.test/sentinel', 'page',"
            " 'completed', now() - interval '30 days', 'uid-sentinel', 'default', 'sentinel')"
        )


def a_prune_pass_ran(database_url: str) -> None:
    insert_sentinel(database_url)
    eventually_blocking(
        lambda: "https://e.test/sentinel" not in remaining_urls(database_url),
        within=30,
        what="a prune pass to delete the sentinel row",
    )


def test_a_scrapejobs_rows_outlive_the_object_until_its_own_retention_ends(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    operator_factory(empty_database_url, environment=RETENTION_ENVIRONMENT)
    manifest = scrapejob(
        "kept-for-three-days",
        urls=["https://shop.example.com/a", "https://shop.example.com/b"],
        retention={"days": 3},
    )
    manifest["metadata"]["namespace"] = namespace
    kubectl.create(manifest)
    uid = str(kubectl.get("scrapejob", "kept-for-three-days", namespace)["metadata"]["uid"])
    eventually_blocking(
        lambda: owner_progress(empty_database_url, uid).total == 2,
        within=30,
        what="the job's two rows",
    )
    with psycopg.connect(empty_database_url) as connection:
        retained = connection.execute(
            "SELECT DISTINCT retain_for FROM scraping_jobs WHERE owner_uid = %s", (uid,)
        ).fetchall()
    assert retained == [(timedelta(days=3),)]
    work_rows(empty_database_url, limit=1)

    # Deleting the object cancels the pending row and leaves both rows, the result too.
    kubectl.run("delete", "scrapejob", "kept-for-three-days", "-n", namespace, "--timeout=30s")
    progress = owner_progress(empty_database_url, uid)
    assert (progress.succeeded, progress.cancelled) == (1, 1)

    # Past the operator's default (1 day here) but within the job's own 3 days: kept.
    backdate_finished(empty_database_url, uid, days=2)
    a_prune_pass_ran(empty_database_url)
    assert owner_progress(empty_database_url, uid).total == 2

    # Past its own retention: gone.
    backdate_finished(empty_database_url, uid, days=4)
    eventually_blocking(
        lambda: owner_progress(empty_database_url, uid).total == 0,
        within=30,
        what="the retention loop to delete the job's rows after its retention",
    )

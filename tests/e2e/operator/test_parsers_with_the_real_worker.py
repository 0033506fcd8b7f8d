"""Custom parsers end to end on the real parts (kube-apiserver, PostgreSQL, the operator
process, `scrapeq worker --burst` processes): a ScrapeJob with `parser:` and classic rows with
a `parser_type` get the parser's results, a label routes a followed page to another parser, a
producer's own label completes as before, and once a worker has published its parsers a
ScrapeJob naming one it lacks gets UnknownParser (docs/parsers.md).

The parser package is the test distribution of tests/parser_distribution.py, on the worker
processes' PYTHONPATH: the worker loads it through its entry points, as it loads a package
installed in its image.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e.operator.operator_parts import (
    REPOSITORY_ROOT,
    Kubectl,
    OperatorProcess,
    loopback_site,
    owner_progress,
    scrapejob,
    wait_for_status,
    worker_command,
)
from tests.parser_distribution import write_parser_distribution
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres, pytest.mark.timeout(180)]


def _page(path: str) -> bytes | None:
    if not path.startswith("/static/"):
        return None
    number = int(path.rsplit("/", 1)[1])
    return (
        f'<html><head><title>Static {number}</title></head><body><h1 class="name">'
        f'Static {number}</h1><a href="/static/{number + 1}">next</a></body></html>'
    ).encode()


@pytest.fixture
def site() -> Iterator[str]:
    with loopback_site(_page) as url:
        yield url


def run_worker(database_url: str, packages: Path) -> subprocess.CompletedProcess[str]:
    """`scrapeq worker --burst` with the test parser package importable."""
    python_path = os.pathsep.join(filter(None, [str(packages), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        worker_command("--burst"),
        cwd=REPOSITORY_ROOT,
        env={**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": python_path},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


ROW = "SELECT url_to_scrape, parser_type, status::text, result FROM scraping_jobs"


def rows_of(database_url: str, uid: str) -> list[tuple[str, str, str, Any]]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        return [
            (row[0], row[1], row[2], row[3])
            for row in connection.execute(ROW + " WHERE owner_uid = %s ORDER BY id", (uid,))
        ]


def row_of(database_url: str, url: str) -> tuple[str, str, Any]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        row = connection.execute(ROW + " WHERE url_to_scrape = %s", (url,)).fetchone()
    assert row is not None, url
    return (row[1], row[2], row[3])


def test_scrapejobs_and_classic_rows_get_their_parsers_results_from_a_real_worker(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    site: str,
    tmp_path: Path,
) -> None:
    write_parser_distribution(tmp_path)
    operator_factory(empty_database_url)
    manifest = scrapejob("parsed", url=f"{site}/static/1", render=False, parser="shop.product")
    manifest["metadata"]["namespace"] = namespace
    kubectl.create(manifest)
    uid = kubectl.get("scrapejob", "parsed", namespace)["metadata"]["uid"]
    # No worker has published yet: the operator cannot know, so it queues the rows.
    eventually_blocking(
        lambda: owner_progress(empty_database_url, uid).total == 1, within=30, what="rows"
    )
    with psycopg.connect(empty_database_url, autocommit=True) as connection:
        for path, parser_type in (("/static/10", "shop.async"), ("/static/20", "product_page")):
            connection.execute(
                "INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload)"
                " VALUES (%s, %s, '{\"render\": false}')",
                (f"{site}{path}", parser_type),
            )

    worker = run_worker(empty_database_url, tmp_path)
    assert worker.returncode == 0, worker.stderr[-3000:]

    found = rows_of(empty_database_url, uid)
    assert len(found) == 2, [(url, kind, status) for url, kind, status, _ in found]
    [(_, parser_type, status, result), (child_url, child_type, child_status, child)] = rows_of(
        empty_database_url, uid
    )
    assert (parser_type, status) == ("shop.product", "completed")
    assert result["parser"] == "shop.product"
    assert result["data"]["heading"] == "Static 1"
    assert (child_url, child_type, child_status) == (f"{site}/static/2", "detail", "completed")
    assert child["data"] == {"kind": "detail", "heading": "Static 2", "parser_type": "detail"}
    assert row_of(empty_database_url, f"{site}/static/10")[2]["data"]["kind"] == "async"
    kind, status, result = row_of(empty_database_url, f"{site}/static/20")
    assert (kind, status) == ("product_page", "completed")
    assert "data" not in result
    assert result["title"] == "Static 20"
    wait_for_status(
        kubectl,
        namespace,
        "parsed",
        lambda status: status.get("phase") == "Succeeded",
        what="the parsed ScrapeJob to succeed",
    )

    # The worker published what it loaded: a parser it lacks now holds a ScrapeJob back.
    unknown = scrapejob("unknown", url=f"{site}/static/30", render=False, parser="shop.nope")
    unknown["metadata"]["namespace"] = namespace
    kubectl.create(unknown)
    status = wait_for_status(
        kubectl,
        namespace,
        "unknown",
        lambda status: status.get("reason") == "UnknownParser",
        what="UnknownParser",
        timeout=30,
    )
    assert "they have: detail, shop.async" in status["message"]

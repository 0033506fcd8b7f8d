"""Parsers from an installed package, run by a real worker on real rows: PostgreSQL, Chromium for
rendered pages and the plain-HTTP engine (docs/parsers.md). The parser package is a test
distribution on sys.path (tests/parser_distribution.py), loaded through its entry points as
a worker image's package is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import scrapeq_queue as queue
from scrapeq_worker.settings import WorkerSettings

from tests.parser_distribution import install_parser_distribution

from .conftest import Connection, job_row, run_burst
from .site import HostileSite

pytestmark = [pytest.mark.postgres, pytest.mark.chromium, pytest.mark.timeout(120)]


@pytest.fixture
def parser_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test parser package, installed for this test only (tests/parser_distribution.py)."""
    return install_parser_distribution(tmp_path, monkeypatch)


EXTRACT = {"price": ".price"}
FOLLOW = {"selector": "a.product", "maxDepth": 1}


async def enqueue(connection: Connection, url: str, **options: Any) -> int:
    job_id = await queue.enqueue(connection, url, dedup_key=url, **options)
    assert job_id is not None
    return job_id


async def children(connection: Connection, parent_id: int) -> list[tuple[str, str, str, Any]]:
    cursor = await connection.execute(
        "SELECT url_to_scrape, parser_type, status::text, result FROM scraping_jobs "
        "WHERE parent_id = %s ORDER BY id",
        (parent_id,),
    )
    return [tuple(row) for row in await cursor.fetchall()]  # type: ignore[misc]


@pytest.mark.usefixtures("parser_distribution")
@pytest.mark.parametrize(("render", "path"), [(True, "/js/4"), (False, "/static/4")])
async def test_the_payloads_parser_reads_the_page_in_both_engines_and_labels_route_followed_pages(
    site: HostileSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    render: bool,
    path: str,
) -> None:
    job_id = await enqueue(
        connection,
        site.url(path),
        payload={"render": render, "extract": EXTRACT, "parser": "shop.product"},
    )

    await run_burst(worker_settings)

    row = await job_row(connection, job_id)
    assert row.status == "completed", row.last_error
    heading = "Laptop 4" if render else "Static 4"
    assert row.result["parser"] == "shop.product"
    data = row.result["data"]
    # For a rendered page the HTML is the DOM after its script ran: the heading exists only there.
    assert data["heading"] == heading
    assert data["price"] == ("4.99" if render else "4.50")
    assert data["title"] == ("Product 4" if render else "Static 4")
    assert data["status"] == 200
    assert data["engine"] == ("browser" if render else "http")
    assert data["content_type"].startswith("text/html")
    assert data["html_truncated"] is False
    # The declarative result is still there beside the parser's data.
    assert row.result["fields"] == {"price": data["price"]}
    # The parser asked for the next product (same site, labelled) and for another host: only
    # the first is queued, as a row the `detail` parser parses.
    follow = await children(connection, job_id)
    next_url = site.url(path.replace("4", "5"))
    assert [(url, parser_type, status) for url, parser_type, status, _ in follow] == [
        (next_url, "detail", "completed")
    ]
    assert follow[0][3]["parser"] == "detail"
    assert follow[0][3]["data"] == {
        "kind": "detail",
        "heading": heading.replace("4", "5"),
        "parser_type": "detail",
    }


@pytest.mark.usefixtures("parser_distribution")
async def test_a_classic_row_whose_parser_type_names_a_registered_parser_runs_it(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    async_id = await enqueue(connection, site.url("/js/2"), parser_type="shop.async")
    plain_id = await enqueue(
        connection, site.url("/static/2"), parser_type="product_page", payload={"render": False}
    )
    default_id = await enqueue(connection, site.url("/static/3"), payload={"render": False})

    worker = await run_burst(worker_settings)

    # The worker published what it loaded for the queue it serves.
    published = await queue.queue_parsers(connection, "default")
    assert published.workers == 1
    assert published.parsers == frozenset(worker.parsers.names)
    assert {"shop.async", "shop.product", "detail"} <= published.parsers
    parsed = await job_row(connection, async_id)
    assert parsed.status == "completed", parsed.last_error
    assert parsed.result["data"] == {"kind": "async", "heading": "Laptop 2", "engine": "browser"}
    # An unregistered producer label: the declarative payload decides, as it always did.
    for job_id in (plain_id, default_id):
        row = await job_row(connection, job_id)
        assert row.status == "completed", row.last_error
        assert "parser" not in row.result
        assert "data" not in row.result
        assert row.result["title"].startswith("Static")
    counted = worker.metrics.registry.get_sample_value(
        "scrapeq_worker_unregistered_parser_types_total",
        {"queue": "default", "parser_type": "product_page"},
    )
    assert counted == 1
    assert (
        worker.metrics.registry.get_sample_value(
            "scrapeq_worker_unregistered_parser_types_total",
            {"queue": "default", "parser_type": "default"},
        )
        is None
    )


@pytest.mark.usefixtures("parser_distribution")
async def test_a_pool_that_requires_registered_parsers_fails_unknown_parser_types_and_names_its_own(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    label_id = await enqueue(
        connection, site.url("/static/1"), parser_type="product_page", payload={"render": False}
    )
    default_id = await enqueue(connection, site.url("/static/2"), payload={"render": False})
    registered_id = await enqueue(
        connection, site.url("/static/3"), parser_type="detail", payload={"render": False}
    )

    await run_burst(worker_settings, require_registered_parsers=True)

    failed = await job_row(connection, label_id)
    assert failed.status == "failed"
    assert failed.last_reason == "unknown_parser"
    assert failed.retry_count == 0
    assert failed.last_error is not None
    assert "'product_page'" in failed.last_error
    assert "detail" in failed.last_error
    assert "shop.product" in failed.last_error
    assert (await job_row(connection, default_id)).status == "completed"
    assert (await job_row(connection, registered_id)).result["data"]["kind"] == "detail"


@pytest.mark.usefixtures("parser_distribution")
async def test_a_payload_parser_the_worker_lacks_fails_unknown_parser_before_any_fetch(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    job_id = await enqueue(
        connection, site.url("/static/9"), payload={"render": False, "parser": "shop.nope"}
    )

    await run_burst(worker_settings)

    row = await job_row(connection, job_id)
    assert (row.status, row.last_reason) == ("failed", "unknown_parser")
    assert row.last_error is not None
    assert "the payload's parser 'shop.nope'" in row.last_error
    assert site.hits["/static/9"] == 0


@pytest.mark.usefixtures("parser_distribution")
@pytest.mark.parametrize(
    ("parser", "reason", "says", "status"),
    [
        ("shop.broken", "parser_error", "raised ValueError: no price on", "failed"),
        ("shop.exits", "parser_error", "raised SystemExit", "failed"),
        ("shop.not-json", "parser_result_invalid", "not JSON", "failed"),
        ("shop.too-large", "parser_result_invalid", "result limit", "failed"),
        ("shop.not-a-mapping", "parser_result_invalid", "returned list", "failed"),
        ("shop.slow", "parser_timeout", "did not return within the job's 3s", "failed"),
        ("shop.retry", "parser_retry", "the shop served its queue page", "pending"),
    ],
)
async def test_a_failing_parser_fails_its_row_with_its_reason_and_the_worker_goes_on(
    site: HostileSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    parser: str,
    reason: str,
    says: str,
    status: str,
) -> None:
    bad_id = await enqueue(
        connection,
        site.url("/static/7"),
        # 3 s: time for the page under a loaded machine, less than the slow parser takes.
        payload={"render": False, "parser": parser, "timeoutSeconds": 3},
    )
    good_id = await enqueue(
        connection, site.url("/static/8"), payload={"render": False, "parser": "shop.product"}
    )

    await run_burst(worker_settings)

    bad = await job_row(connection, bad_id)
    assert (bad.status, bad.last_reason) == (status, reason)
    assert bad.last_error is not None
    assert says in bad.last_error
    assert (await job_row(connection, good_id)).status == "completed"


REVEAL_PAGE = """<!doctype html><html><head><title>Reveal</title></head><body>
<h1 class="name">Laptop</h1><button class="reveal">Show price</button>
<ul><li class="tag">new</li><li class="tag">sale</li></ul>
<script>
  document.querySelector('button.reveal').addEventListener('click', function () {
    setTimeout(function () {
      var price = document.createElement('span');
      price.className = 'price';
      price.textContent = '$9.99';
      document.body.appendChild(price);
    }, 20);
  });
</script></body></html>"""


@pytest.mark.usefixtures("parser_distribution")
async def test_an_async_parser_acts_on_the_rendered_page_with_the_step_vocabulary(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    site.pages["reveal"] = REVEAL_PAGE
    rendered = await enqueue(
        connection, site.url("/page/reveal"), payload={"parser": "shop.reveal"}
    )
    static = await enqueue(
        connection,
        site.url("/page/reveal?static"),
        payload={"render": False, "parser": "shop.reveal", "extract": {"price": ".price"}},
    )

    await run_burst(worker_settings)

    row = await job_row(connection, rendered)
    assert row.status == "completed", row.last_error
    data = row.result["data"]
    # The price exists only after the parser's click: read from the live page, after it.
    assert data["before"] is None
    assert data["price"] == "$9.99"
    assert data["tags"] == ["new", "sale"]
    assert data["price_in_html"] is True
    assert data["click"]["action"] == "click"
    static_row = await job_row(connection, static)
    assert static_row.status == "completed", static_row.last_error
    assert static_row.result["data"] == {"kind": "reveal", "actions": False, "price": None}


@pytest.mark.usefixtures("parser_distribution")
async def test_a_parsers_step_is_held_to_the_guard_and_to_the_step_vocabulary(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    site.pages["wander"] = (
        "<!doctype html><html><head><title>links</title></head><body>"
        f'<a class="away" href="{site.bystander_url("/admin")}">admin</a></body></html>'
    )
    wander = await enqueue(
        connection, site.url("/page/wander"), payload={"parser": "shop.wander"}, max_retries=0
    )
    bad = await enqueue(
        connection, site.url("/page/wander?bad"), payload={"parser": "shop.bad-steps"}
    )

    await run_burst(worker_settings)

    wandered = await job_row(connection, wander)
    # The guard's own reason, as for a payload step: not a parser error.
    assert (wandered.status, wandered.last_reason) == ("failed", "blocked_address")
    assert site.bystander_hits == 0
    refused = await job_row(connection, bad)
    assert (refused.status, refused.last_reason) == ("failed", "parser_error")
    assert "steps[0].action" in (refused.last_error or "")

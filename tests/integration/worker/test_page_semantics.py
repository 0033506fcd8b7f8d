"""What a page's job means, end to end with the real worker: rows inserted the classic way,
follow patterns a user wrote, and the user agent a site sees (docs/queue.md, docs/worker.md)."""

from __future__ import annotations

import importlib.metadata
import time

import pytest
from psycopg.types.json import Jsonb
from scrapeq_worker.settings import WorkerSettings

from .conftest import Connection, job_row, run_burst
from .site import HostileSite

pytestmark = [pytest.mark.postgres, pytest.mark.chromium]


async def insert_classic_row(connection: Connection, url: str, payload: object = None) -> int:
    """A row as a classic producer writes it: plain SQL, the classic columns only (plus
    `payload` when given); every other column takes its default."""
    if payload is None:
        cursor = await connection.execute(
            "INSERT INTO scraping_jobs (url_to_scrape, parser_type) VALUES (%s, 'default')"
            " RETURNING id",
            (url,),
        )
    else:
        cursor = await connection.execute(
            "INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload)"
            " VALUES (%s, 'default', %s) RETURNING id",
            (url, Jsonb(payload)),
        )
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


# --- follow patterns ---------------------------------------------------------------------------

# 28 a's and a character that ends every match attempt: Python's `re` needs about 2**28 steps
# for `(a+)+$` on it (minutes); the worker's patterns must not care.
PATHOLOGICAL_PATH = "/page/" + "a" * 28 + "!"


@pytest.mark.timeout(60)
async def test_a_pattern_that_backtracks_exponentially_stalls_neither_its_job_nor_others(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    site.pages["list"] = (
        "<html><head><title>List</title></head><body>"
        f'<a href="{PATHOLOGICAL_PATH}">trap</a><a href="/page/aaa">match</a></body></html>'
    )
    site.pages["aaa"] = "<html><head><title>Matched</title></head><body></body></html>"
    crawl = {
        "render": False,
        "follow": {"selector": "a", "include": ["(a+)+$"], "exclude": ["(x+x+)+y"]},
    }
    crawl_id = await insert_classic_row(connection, site.url("/page/list"), crawl)
    bystander_id = await insert_classic_row(connection, site.url("/static/1"), {"render": False})

    started = time.monotonic()
    await run_burst(worker_settings)
    elapsed = time.monotonic() - started

    assert (await job_row(connection, crawl_id)).status == "completed"
    assert (await job_row(connection, bystander_id)).status == "completed"
    cursor = await connection.execute(
        "SELECT url_to_scrape, status::text FROM scraping_jobs WHERE parent_id = %s", (crawl_id,)
    )
    assert await cursor.fetchall() == [(site.url("/page/aaa"), "completed")]
    assert site.hits[PATHOLOGICAL_PATH] == 0
    assert elapsed < 20, f"the run took {elapsed:.1f}s"


async def test_a_pattern_re2_cannot_run_fails_its_row_with_the_reason_while_others_complete(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    bad_id = await insert_classic_row(
        connection,
        site.url("/static/1"),
        {"render": False, "follow": {"selector": "a", "include": [r"/(\w+)/\1"]}},
    )
    good_id = await insert_classic_row(connection, site.url("/static/2"), {"render": False})

    await run_burst(worker_settings)

    bad = await job_row(connection, bad_id)
    assert bad.status == "failed"
    assert bad.last_error is not None
    assert "follow.include[0]" in bad.last_error
    assert "invalid escape sequence" in bad.last_error
    assert "no backreferences" in bad.last_error
    assert (await job_row(connection, good_id)).status == "completed"
    assert site.hits["/static/1"] == 0, "a row that cannot run costs the site nothing"


# --- rows inserted the classic way -------------------------------------------------------------

# The title the result must carry is set by a script 100 ms after `load`.
LATE_TITLE_PAGE = """<!doctype html><html><head><title>Before the script</title></head><body>
<p class="state">loading</p>
<script>
  addEventListener('load', () => setTimeout(() => {
    document.title = 'Set by the script';
    document.querySelector('.state').textContent = 'ready';
  }, 100));
</script></body></html>"""


@pytest.mark.timeout(60)
async def test_a_classic_row_waits_until_the_page_scripts_have_finished(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    site.pages["late-title"] = LATE_TITLE_PAGE
    job_id = await insert_classic_row(connection, site.url("/page/late-title"))

    await run_burst(worker_settings)

    row = await job_row(connection, job_id)
    assert row.status == "completed", row.last_error
    assert row.result["engine"] == "browser"
    assert row.result["title"] == "Set by the script"


# --- the user agent ------------------------------------------------------------------------------

CONTACT = "https://ops.scrapeq.test/bot"


@pytest.mark.timeout(60)
async def test_both_engines_send_the_pools_user_agent_and_a_job_can_override_it(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    own = "ExampleResearchBot/2.0 (+https://research.test/about)"
    pool = f"Mozilla/5.0 (compatible; scrapeq/{importlib.metadata.version('scrapeq')}; +{CONTACT})"
    # page name -> (payload, the User-Agent the site must see)
    cases = {
        "browser-default": ({"waitUntil": "load"}, pool),
        "http-default": ({"render": False}, pool),
        "browser-own": ({"waitUntil": "load", "headers": {"User-Agent": own}}, own),
        "http-own": ({"render": False, "headers": {"user-agent": own}}, own),
    }
    ids = []
    for name, (payload, _) in cases.items():
        site.pages[name] = f"<html><head><title>{name}</title></head><body></body></html>"
        ids.append(await insert_classic_row(connection, site.url(f"/page/{name}"), payload))

    await run_burst(worker_settings, user_agent_contact=CONTACT)

    for job_id in ids:
        assert (await job_row(connection, job_id)).status == "completed"
    seen = {name: site.user_agents[f"/page/{name}"] for name in cases}
    assert seen == {name: [expected] for name, (_, expected) in cases.items()}

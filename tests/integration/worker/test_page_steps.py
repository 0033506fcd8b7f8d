"""Page steps on real Chromium against the project's own shop (step_site.py): every item of a
scrolled or "load more" list is read exactly once, clicks and forms change what is read, a
step that fails says which one and why, an endless list ends at its cap, and a step cannot take
the browser anywhere a first navigation could not go (docs/worker.md, "Steps")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import scrapeq_queue as queue
from scrapeq_queue.sealed_credentials import SEALING_KEY_ENV, Credentials, SealingKeys
from scrapeq_worker.settings import WorkerSettings

from .conftest import Connection, job_row, run_burst
from .site import HostileSite
from .step_site import (
    BATCH,
    LOGIN_PASSWORD,
    LOGIN_USER,
    StepSite,
    items,
    running_step_site,
)

pytestmark = [pytest.mark.postgres, pytest.mark.chromium]

ITEMS = {"items": {"selector": "li.item", "all": True}}


@pytest.fixture
def shop() -> Iterator[StepSite]:
    yield from running_step_site()


async def scrape(
    worker_settings: WorkerSettings,
    connection: Connection,
    url: str,
    payload: dict[str, Any],
    **options: Any,
) -> Any:
    """Enqueue one page, run a burst worker, return the row."""
    job_id = await queue.enqueue(connection, url, payload=payload, **options)
    await run_burst(worker_settings)
    return await job_row(connection, job_id)


async def test_scrolling_an_infinite_list_to_its_end_reads_every_item_exactly_once(
    shop: StepSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    row = await scrape(
        worker_settings,
        connection,
        shop.url("/scroll?total=130"),
        {"steps": [{"action": "scroll", "timeoutSeconds": 20}], "extract": ITEMS},
    )

    assert row.status == "completed", row.last_error
    assert row.result["fields"]["items"] == items(130)
    [report] = row.result["steps"]
    assert report["action"] == "scroll"
    assert report["stopped"] == "end"
    # At least one round per batch after the first, and one that found nothing more.
    assert report["rounds"] >= 130 // BATCH + 1


async def test_a_scroll_stops_once_enough_elements_match_its_selector(
    shop: StepSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    step = {"action": "scroll", "selector": "li.item", "count": 60, "timeoutSeconds": 20}
    row = await scrape(
        worker_settings,
        connection,
        shop.url("/scroll?total=1000"),
        {"steps": [step], "extract": ITEMS},
    )

    assert row.status == "completed", row.last_error
    [report] = row.result["steps"]
    assert report["stopped"] == "count"
    assert report["count"] == 60
    assert row.result["fields"]["items"] == items(60)


async def test_an_endless_list_ends_at_the_scrolls_cap_with_the_items_read_so_far(
    shop: StepSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    row = await scrape(
        worker_settings,
        connection,
        shop.url("/scroll?total=0"),
        {"steps": [{"action": "scroll", "maxRounds": 5, "timeoutSeconds": 20}], "extract": ITEMS},
    )

    assert row.status == "completed", row.last_error
    [report] = row.result["steps"]
    assert report == {"action": "scroll", "rounds": 5, "stopped": "max_rounds", "ms": report["ms"]}
    # The first batch came with the page, then one per round.
    assert row.result["fields"]["items"] == items(6 * BATCH)


async def test_load_more_clicks_until_the_button_is_gone_and_every_item_is_read(
    shop: StepSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    row = await scrape(
        worker_settings,
        connection,
        shop.url("/load-more?total=95"),
        {
            "steps": [{"action": "loadMore", "selector": "#more", "timeoutSeconds": 20}],
            "extract": ITEMS,
        },
    )

    assert row.status == "completed", row.last_error
    assert row.result["fields"]["items"] == items(95)
    [report] = row.result["steps"]
    assert (report["clicks"], report["stopped"]) == (4, "gone")


async def test_load_more_ends_at_its_cap_of_clicks(
    shop: StepSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    step = {"action": "loadMore", "selector": "#more", "maxClicks": 2, "timeoutSeconds": 20}
    row = await scrape(
        worker_settings,
        connection,
        shop.url("/load-more?total=1000"),
        {"steps": [step], "extract": ITEMS},
    )

    assert row.status == "completed", row.last_error
    assert row.result["fields"]["items"] == items(3 * BATCH)
    [report] = row.result["steps"]
    assert (report["clicks"], report["stopped"]) == (2, "max_clicks")


async def test_prices_revealed_by_a_click_are_read(
    shop: StepSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    row = await scrape(
        worker_settings,
        connection,
        shop.url("/reveal"),
        {
            "steps": [{"action": "click", "selector": "#reveal", "waitFor": ".price"}],
            "extract": {
                "products": {"selector": ".product", "all": True},
                "prices": {"selector": ".price", "all": True},
            },
        },
    )

    assert row.status == "completed", row.last_error
    assert row.result["fields"] == {
        "products": ["Laptop", "Phone", "Tablet"],
        "prices": ["$1,299.00", "$499.00", "$329.00"],
    }


async def test_a_click_goes_to_the_first_visible_match_scrolled_into_view_as_a_trusted_event(
    shop: StepSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    row = await scrape(
        worker_settings,
        connection,
        shop.url("/buttons"),
        {
            "steps": [{"action": "click", "selector": "button.buy", "waitFor": ".done"}],
            "extract": {"bought": "#bought", "seen": "#seen"},
        },
    )

    assert row.status == "completed", row.last_error
    # The mouse came to the button, then pressed and let go: the events a visitor's click makes.
    assert row.result["fields"] == {
        "bought": "shown trusted",
        "seen": "mouseover mousemove mousedown mouseup",
    }


async def test_a_form_is_filled_typed_into_selected_hovered_and_sent_with_a_key(
    shop: StepSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    steps = [
        {"action": "fill", "selector": "input[name=q]", "value": "lap"},
        {"action": "type", "selector": "input[name=q]", "value": "top"},
        {"action": "select", "selector": "#size", "value": "xl"},
        {"action": "hover", "selector": "button"},
        {"action": "press", "selector": "input[name=q]", "key": "Enter"},
    ]
    row = await scrape(
        worker_settings,
        connection,
        shop.url("/form"),
        {"steps": steps, "extract": {"result": "#result", "hovered": "#hovered"}},
    )

    assert row.status == "completed", row.last_error
    assert row.result["fields"] == {"result": "query=laptop size=xl", "hovered": "hovered"}
    assert [report["action"] for report in row.result["steps"]] == [
        "fill",
        "type",
        "select",
        "hover",
        "press",
    ]


async def test_waiting_for_a_response_and_for_the_network_to_go_quiet_reads_late_data(
    shop: StepSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    steps = [
        {"action": "waitForResponse", "urlPattern": r"/api/data\?kind=sales$"},
        {"action": "waitForNetworkIdle"},
    ]
    row = await scrape(
        worker_settings,
        connection,
        shop.url("/fetching"),
        {"waitUntil": "load", "steps": steps, "extract": {"data": "#data"}},
    )

    assert row.status == "completed", row.last_error
    assert row.result["fields"] == {"data": "42 sold"}
    assert row.result["steps"][0]["status"] == 200


async def test_a_step_that_fails_names_its_position_action_and_what_it_waited_for(
    shop: StepSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    steps = [
        {"action": "hover", "selector": "button"},
        {"action": "click", "selector": "button.missing", "timeoutSeconds": 1},
    ]
    row = await scrape(
        worker_settings, connection, shop.url("/form"), {"steps": steps}, max_retries=0
    )

    assert row.status == "failed"
    assert row.last_reason == "step_failed"
    assert row.last_error == (
        'step 1 (click): no visible element matched "button.missing" within 1s'
    )


async def test_a_response_that_never_comes_fails_its_step_and_is_retried(
    shop: StepSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    step = {"action": "waitForResponse", "urlPattern": "/api/never", "timeoutSeconds": 1}
    job_id = await queue.enqueue(
        connection, shop.url("/fetching"), payload={"steps": [step]}, max_retries=3
    )
    await run_burst(worker_settings)

    row = await job_row(connection, job_id)
    assert row.attempts[0].reason == "step_failed"
    assert row.attempts[0].error == (
        "step 0 (waitForResponse): no response's URL matched the urlPattern within 1s"
    )
    # Retried after the job's backoff, which a burst worker does not wait for.
    assert row.status == "pending"
    assert row.retry_count == 1


async def test_a_click_on_a_link_to_an_internal_address_is_refused_like_a_first_navigation(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    site.pages["to-internal"] = (
        "<!doctype html><html><head><title>links</title></head><body>"
        f'<a id="go" href="{site.bystander_url("/admin")}">admin</a></body></html>'
    )
    step = {"action": "click", "selector": "#go", "waitForNavigation": True}
    row = await scrape(
        worker_settings,
        connection,
        site.url("/page/to-internal"),
        {"steps": [step], "extract": {"title": "title"}},
        max_retries=0,
    )

    assert row.status == "failed"
    assert row.last_reason == "blocked_address"
    assert site.bystander_hits == 0


def sealed_login(key: str, origin: str) -> str:
    """The shop's password sealed as the operator seals a step's valueFrom."""
    values = {"shop-login/password": LOGIN_PASSWORD}
    return SealingKeys.from_text(key).seal(Credentials(origins=(origin,), values=values))


LOGIN_STEPS = [
    {"action": "fill", "selector": "input[name=user]", "value": LOGIN_USER},
    {"action": "type", "selector": "input[name=password]", "sealedValue": "shop-login/password"},
    {"action": "click", "selector": "button[type=submit]", "waitForNavigation": True},
]


async def test_a_sealed_password_is_typed_into_a_login_form_and_shown_nowhere(
    shop: StepSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = SealingKeys.generate()
    monkeypatch.setenv(SEALING_KEY_ENV, key)
    payload = {
        "sealed": sealed_login(key, shop.url("")),
        "steps": LOGIN_STEPS,
        "extract": {"welcome": ".welcome", "price": ".member-price"},
    }
    caplog.set_level("DEBUG")
    row = await scrape(worker_settings, connection, shop.url("/login"), payload)

    assert row.status == "completed", row.last_error
    assert row.result["fields"] == {
        "welcome": f"Welcome, {LOGIN_USER}",
        "price": "$100.00 for members",
    }
    assert row.result["final_url"] == shop.url("/members/1")
    assert shop.logins == 1
    cursor = await connection.execute("SELECT t::text FROM scraping_jobs AS t")
    rows = "\n".join(text for (text,) in await cursor.fetchall())
    assert "scrapeq-sealed:v1:" in rows
    assert LOGIN_PASSWORD not in rows
    assert LOGIN_PASSWORD not in caplog.text


async def test_a_sealed_value_is_never_typed_into_a_page_of_another_origin(
    shop: StepSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = SealingKeys.generate()
    monkeypatch.setenv(SEALING_KEY_ENV, key)
    payload = {"sealed": sealed_login(key, "https://bank.example:443"), "steps": LOGIN_STEPS}
    row = await scrape(worker_settings, connection, shop.url("/login"), payload, max_retries=0)

    assert row.status == "failed"
    assert row.last_reason == "step_failed"
    assert row.last_error == (
        f"step 1 (type): the page is on {shop.url('')}, and its sealed value is typed only on "
        "https://bank.example:443"
    )
    assert shop.logins == 0


def login_session(password_step: dict[str, Any]) -> dict[str, Any]:
    return {
        "login": {
            "url": "",  # set by the test: the shop's port is its own
            "steps": [LOGIN_STEPS[0], password_step, LOGIN_STEPS[2]],
            "successSelector": ".welcome",
        }
    }


async def test_a_login_runs_once_per_browser_context_and_its_cookies_serve_the_owners_pages(
    shop: StepSite,
    worker_settings: WorkerSettings,
    connection: Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = SealingKeys.generate()
    monkeypatch.setenv(SEALING_KEY_ENV, key)
    session = login_session(LOGIN_STEPS[1])
    session["login"]["url"] = shop.url("/login")
    payload = {
        "sealed": sealed_login(key, shop.url("")),
        "session": session,
        "extract": {"price": ".member-price"},
    }
    owner = queue.Owner(uid="8d0c1a52-login", namespace="shop", name="members")
    ids = [
        await queue.enqueue(connection, shop.url(f"/members/{n}"), payload=payload, owner=owner)
        for n in range(1, 5)
    ]
    # One page at a time, so that every page is rendered in the owner's one warm context.
    await run_burst(worker_settings, concurrency=1)

    rows = [await job_row(connection, job_id) for job_id in ids]
    assert [row.status for row in rows] == ["completed"] * 4, [row.last_error for row in rows]
    assert [row.result["fields"]["price"] for row in rows] == [
        f"${n}00.00 for members" for n in range(1, 5)
    ]
    assert [row.result["final_url"] for row in rows] == [
        shop.url(f"/members/{n}") for n in range(1, 5)
    ]
    assert shop.logins == 1
    assert "login_ms" in rows[0].result["timing_ms"]
    assert all("login_ms" not in row.result["timing_ms"] for row in rows[1:])


async def test_a_login_that_fails_fails_its_row_clearly_and_never_as_an_empty_result(
    shop: StepSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    session = login_session(
        {"action": "type", "selector": "input[name=password]", "value": "wrong guess"}
    )
    session["login"]["url"] = shop.url("/login")
    row = await scrape(
        worker_settings,
        connection,
        shop.url("/members/1"),
        {"session": session, "extract": {"price": ".member-price"}},
        max_retries=3,
    )

    assert row.status == "failed"
    assert row.last_reason == "login_failed"
    # Failed for good at once: a wrong password tried again could lock the account.
    assert row.retry_count == 0
    assert row.last_error == (
        f"login at {shop.url('/login')} failed: after its steps the page (now "
        f"{shop.url('/login?error=wrong+user+or+password')}) showed no '.welcome' "
        "(successSelector)"
    )
    assert shop.hits["/members/1"] == 0


async def test_a_login_page_on_an_internal_address_is_refused_by_the_guard(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    session = login_session(
        {"action": "type", "selector": "input[name=password]", "value": LOGIN_PASSWORD}
    )
    session["login"]["url"] = site.bystander_url("/login")
    row = await scrape(
        worker_settings,
        connection,
        site.url("/js/1"),
        {"session": session, "extract": {"name": "h1.name"}},
        max_retries=0,
    )

    assert row.status == "failed"
    assert row.last_reason == "blocked_address"
    assert site.bystander_hits == 0
    assert site.hits["/js/1"] == 0


async def test_a_response_a_click_caused_counts_even_if_it_arrived_before_its_wait_began(
    shop: StepSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    steps = [
        {"action": "click", "selector": "#reveal", "waitFor": ".price"},
        # The prices' response is in by now: it still satisfies this wait, once.
        {"action": "waitForResponse", "urlPattern": "/api/prices$"},
        {"action": "waitForResponse", "urlPattern": "/api/prices$", "timeoutSeconds": 1},
    ]
    row = await scrape(
        worker_settings, connection, shop.url("/reveal"), {"steps": steps}, max_retries=0
    )

    assert row.last_error == (
        "step 2 (waitForResponse): no response's URL matched the urlPattern within 1s"
    )
    assert shop.hits["/api/prices"] == 1


async def test_a_step_with_a_selector_chromium_cannot_parse_fails_for_good_as_bad_selector(
    shop: StepSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    steps = [
        {"action": "scroll", "maxRounds": 1},
        {"action": "click", "selector": "button[", "timeoutSeconds": 2},
    ]
    row = await scrape(worker_settings, connection, shop.url("/form"), {"steps": steps})

    assert row.status == "failed"
    assert row.last_reason == "bad_selector"
    assert row.last_error is not None
    assert row.last_error.startswith("step 1 (click): invalid CSS selector")

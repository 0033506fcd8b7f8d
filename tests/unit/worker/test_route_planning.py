"""The payload of pages followed under a label (routes.py, following.py)."""

from __future__ import annotations

from scrapeq_worker.following import followed_rows
from scrapeq_worker.job_options import options_from_payload
from scrapeq_worker.routes import route_payload

ROUTES = {
    "detail": {
        "extract": {"name": "h1"},
        "follow": {"selector": "a.reviews", "label": "reviews", "maxDepth": 2},
    },
    "reviews": {"items": {"selector": "li", "fields": {"text": ""}}},
}
LISTING = {
    "render": False,
    "headers": {"Accept-Language": "en"},
    "items": {"selector": "li.product", "fields": {"name": ".name"}},
    "next": {"selector": "a.next", "page": 4},
    "follow": {"selector": "a.product", "label": "detail", "maxPages": 50},
    "routes": ROUTES,
}
URLS = ["https://shop.example/p/1", "https://shop.example/p/2"]


def test_a_labelled_page_carries_its_route_in_place_of_the_page_s_own_options() -> None:
    payload = route_payload(LISTING, "detail", max_pages=50)
    assert payload == {
        "render": False,
        "headers": {"Accept-Language": "en"},
        "extract": {"name": "h1"},
        "follow": {"selector": "a.reviews", "label": "reviews", "maxDepth": 2, "maxPages": 50},
        "routes": ROUTES,
        "route": "detail",
    }
    options = options_from_payload(payload, default_timeout_seconds=30)
    assert options.route == "detail"
    assert options.items is None
    assert options.next is None
    assert options.follow is not None
    assert options.follow.label == "reviews"


def test_a_route_s_own_max_pages_wins_and_a_route_without_follow_gets_none() -> None:
    routes = {"detail": {"follow": {"selector": "a", "maxPages": 7}}, "reviews": {}}
    listing = {**LISTING, "routes": routes}
    assert route_payload(listing, "detail", max_pages=50)["follow"]["maxPages"] == 7
    assert "follow" not in route_payload(listing, "reviews", max_pages=50)


def test_a_scrapejob_s_labelled_rows_each_carry_the_route_payload() -> None:
    options = options_from_payload(LISTING, default_timeout_seconds=30)
    rows = followed_rows(LISTING, URLS, options.follow, owned=True)
    assert [row.url for row in rows] == URLS
    for row in rows:
        assert row.payload == route_payload(LISTING, "detail", max_pages=50)
        assert row.parser_type is None
        assert not row.next_page


def test_a_classic_row_s_labelled_rows_share_its_remaining_budget_in_the_route_s_follow() -> None:
    options = options_from_payload(LISTING, default_timeout_seconds=30)
    rows = followed_rows(LISTING, URLS, options.follow, owned=False)
    budgets = [row.payload["follow"]["maxPages"] for row in rows if row.payload]
    assert budgets == [24, 24]
    assert all(row.payload and row.payload["route"] == "detail" for row in rows)


def test_a_parser_label_that_names_a_route_routes_and_any_other_keeps_the_parser_type() -> None:
    payload = {**LISTING, "follow": {"selector": "a.product"}, "parser": "listing"}
    options = options_from_payload(payload, default_timeout_seconds=30)
    rows = followed_rows(
        payload,
        URLS,
        options.follow,
        owned=True,
        labels={URLS[0]: "reviews", URLS[1]: "product_page"},
    )
    assert rows[0].payload is not None
    assert rows[0].payload["route"] == "reviews"
    assert rows[0].parser_type is None
    assert rows[1].parser_type == "product_page"
    assert rows[1].payload is not None
    assert "parser" not in rows[1].payload


def test_a_route_s_steps_travel_with_its_rows_and_the_listing_s_own_do_not() -> None:
    steps = [{"action": "click", "selector": "button.specs"}]
    listing = {
        **LISTING,
        "render": True,
        "steps": [{"action": "scroll"}],
        "routes": {**ROUTES, "detail": {**ROUTES["detail"], "steps": steps}},
    }
    options = options_from_payload(listing, default_timeout_seconds=30)
    for owned in (True, False):
        rows = followed_rows(listing, URLS, options.follow, owned=owned)
        assert all(row.payload and row.payload["steps"] == steps for row in rows)

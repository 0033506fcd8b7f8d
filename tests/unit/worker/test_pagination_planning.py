"""Which link of a page is its next page, what the next page's row carries, and what the
page's result says about its chain (pagination.py)."""

from __future__ import annotations

from scrapeq_queue import FollowUrl
from scrapeq_worker.following import followed_rows
from scrapeq_worker.job_options import FollowOptions, NextOptions, options_from_payload
from scrapeq_worker.pagination import next_page

PAGE = "https://shop.example/list?page=3"
PAYLOAD = {"items": {"selector": "li", "fields": {"n": "b"}}, "next": {"selector": "a.next"}}


def test_a_payload_without_max_pages_or_page_starts_a_chain_of_at_most_100_pages() -> None:
    options = options_from_payload(PAYLOAD, default_timeout_seconds=30)
    assert options.next == NextOptions(selector="a.next", max_pages=100, page=1)


def test_the_first_link_on_the_same_site_is_queued_with_the_payload_one_page_further() -> None:
    options = NextOptions(selector="a.next", max_pages=100, page=3)
    links = [
        "mailto:shop@shop.example",
        "https://ads.example/list?page=4",
        PAGE,
        "https://www.shop.example/list?page=4",
        "https://shop.example/list?page=5",
    ]

    chain = next_page(links, options, PAYLOAD, page_urls=[PAGE, PAGE])

    assert chain.result == {"page": 3, "next": "https://www.shop.example/list?page=4"}
    assert chain.row == FollowUrl(
        "https://www.shop.example/list?page=4",
        payload={**PAYLOAD, "next": {"selector": "a.next", "page": 4}},
        next_page=True,
    )
    assert PAYLOAD["next"] == {"selector": "a.next"}


def test_a_page_without_a_next_link_other_than_itself_is_the_last_page() -> None:
    options = NextOptions(selector="a.next", max_pages=100, page=30)
    chain = next_page([PAGE], options, PAYLOAD, page_urls=[PAGE, PAGE])
    assert chain == type(chain)({"page": 30, "next": None, "end": "last_page"}, None)


def test_the_page_at_max_pages_queues_nothing_and_names_the_link_it_dropped() -> None:
    options = NextOptions(selector="a.next", max_pages=3, page=3)
    chain = next_page(["https://shop.example/list?page=4"], options, PAYLOAD, page_urls=[PAGE])
    assert chain.row is None
    assert chain.result == {
        "page": 3,
        "next": None,
        "end": "max_pages",
        "max_pages": 3,
        "dropped": "https://shop.example/list?page=4",
    }


def test_followed_pages_of_a_chain_page_carry_no_next_whoever_owns_them() -> None:
    follow = FollowOptions(selector="a.product", max_depth=1, max_pages=10)
    payload = {**PAYLOAD, "follow": {"selector": "a.product"}}
    urls = ["https://shop.example/p/1", "https://shop.example/p/2"]
    for owned in (True, False):
        rows = followed_rows(payload, urls, follow, owned=owned)
        assert [row.url for row in rows] == urls
        for row in rows:
            assert row.payload is not None
            assert "next" not in row.payload
            assert row.payload["items"] == PAYLOAD["items"]
            assert not row.next_page

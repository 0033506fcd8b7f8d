"""Which links a page's `follow` options keep, and the payload of the pages they lead to."""

from __future__ import annotations

import time

import pytest
from scrapeq_queue.payload import compile_url_pattern
from scrapeq_worker.errors import BadInput
from scrapeq_worker.following import (
    FollowPlan,
    follow_dropped,
    followed_payload,
    followed_rows,
    page_budgets,
    plan_follow,
    select_links,
)
from scrapeq_worker.job_options import FollowOptions, options_from_payload

LINKS = [
    "https://shop.example/product/1",
    "https://www.shop.example/product/2",
    "https://shop.example/product/1",
    "https://other.example/product/3",
    "https://shop.example/product/4?sort=price",
    "mailto:sales@shop.example",
    "javascript:void(0)",
    "ftp://shop.example/file",
]


def follow(**changes: object) -> FollowOptions:
    options = {"selector": "a", "max_depth": 1, "max_pages": 100, **changes}
    return FollowOptions(**options)  # type: ignore[arg-type]


def test_by_default_only_http_links_on_the_same_site_are_kept_once_in_page_order() -> None:
    chosen = select_links(LINKS, follow(), page_urls=["https://shop.example/list"])
    assert chosen == [
        "https://shop.example/product/1",
        "https://www.shop.example/product/2",
        "https://shop.example/product/4?sort=price",
    ]


def test_a_redirect_to_another_host_makes_links_on_either_host_the_same_site() -> None:
    chosen = select_links(
        ["https://other.example/product/3", "https://third.example/x"],
        follow(),
        page_urls=["https://shop.example/list", "https://other.example/list"],
    )
    assert chosen == ["https://other.example/product/3"]


def test_same_host_false_leaves_the_host() -> None:
    chosen = select_links(LINKS, follow(same_host=False), page_urls=["https://shop.example/"])
    assert "https://other.example/product/3" in chosen
    assert not any(link.startswith(("mailto:", "javascript:", "ftp:")) for link in chosen)


def test_include_keeps_only_matching_links_and_exclude_drops_matching_ones() -> None:
    options = follow(
        include=(compile_url_pattern(r"/product/\d+"),), exclude=(compile_url_pattern(r"\?sort="),)
    )
    chosen = select_links(
        [*LINKS, "https://shop.example/about"], options, page_urls=["https://shop.example/"]
    )
    assert chosen == ["https://shop.example/product/1", "https://www.shop.example/product/2"]


def test_followed_pages_get_the_follow_extract_and_keep_following() -> None:
    payload = {
        "render": False,
        "extract": {"product_links": {"selector": "a", "attribute": "href", "all": True}},
        "follow": {"selector": "a.product", "maxDepth": 2, "extract": {"name": "h1"}},
    }
    options = options_from_payload(payload, default_timeout_seconds=30)
    assert options.follow is not None
    child = followed_payload(payload, options.follow)
    assert child == {**payload, "extract": {"name": "h1"}}
    assert payload["extract"] != child["extract"], "the parent's payload is not changed"


def test_without_a_follow_extract_followed_pages_share_the_parent_payload() -> None:
    options = options_from_payload({"follow": {"selector": "a"}}, default_timeout_seconds=30)
    assert options.follow is not None
    assert options.follow.max_pages == 1000, "a crawl is bounded by default"
    assert followed_payload({"follow": {"selector": "a"}}, options.follow) is None


def test_followed_pages_run_none_of_the_parents_steps_and_keep_its_login() -> None:
    payload = {
        "steps": [{"action": "scroll", "selector": "li.product", "count": 100}],
        "session": {
            "login": {
                "url": "https://shop.example/login",
                "steps": [{"action": "hover", "selector": "a"}],
            }
        },
        "follow": {"selector": "li.product a"},
    }
    options = options_from_payload(payload, default_timeout_seconds=30)
    assert options.follow is not None
    child = followed_payload(payload, options.follow)
    assert child == {"session": payload["session"], "follow": payload["follow"]}
    assert "steps" in payload, "the parent's payload is not changed"
    [row] = followed_rows(payload, ["https://shop.example/p/1"], options.follow, owned=False)
    assert row.payload is not None
    assert "steps" not in row.payload
    assert row.payload["session"] == payload["session"]


@pytest.mark.timeout(10)
def test_a_pattern_that_backtracks_exponentially_in_python_matches_in_linear_time() -> None:
    # Python's re needs about 2**n steps for `(a+)+$` against n a's and a non-matching end:
    # 21 s for a 30-character path. RE2 answers at once whatever the length.
    options = follow(include=(compile_url_pattern("(a+)+$"),))
    links = [f"https://shop.example/{'a' * length}!" for length in (30, 5_000, 100_000)]
    started = time.monotonic()
    chosen = select_links([*links, "https://shop.example/aaa"], options, page_urls=links[:1])
    assert chosen == ["https://shop.example/aaa"]
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize(
    ("pattern", "refused_for"),
    [
        (r"(a)\1", "invalid escape sequence"),
        ("/product/(?=\\d)", "invalid perl operator"),
        ("(unclosed", "missing )"),
    ],
)
def test_a_pattern_re2_cannot_run_is_refused_as_bad_input_naming_the_reason(
    pattern: str, refused_for: str
) -> None:
    with pytest.raises(BadInput) as caught:
        options_from_payload(
            {"follow": {"selector": "a", "exclude": [pattern]}}, default_timeout_seconds=30
        )
    message = str(caught.value)
    assert f"follow.exclude[0] {pattern!r} is not a valid regular expression" in message
    assert refused_for in message
    assert "RE2 syntax" in message
    assert caught.value.reason == "invalid_payload"


def test_a_budget_is_split_as_evenly_as_it_goes_and_adds_up() -> None:
    assert page_budgets(3, 10) == [4, 3, 3]
    assert page_budgets(4, 2) == [1, 1, 0, 0]
    assert page_budgets(2, 0) == [0, 0]
    assert page_budgets(0, 5) == []


def test_a_row_without_an_owner_queues_at_most_its_max_pages_links_and_says_how_many_not() -> None:
    links = [f"https://shop.example/{n}" for n in range(30)]
    plan = plan_follow(links, follow(max_pages=12), owned=False)
    assert plan == FollowPlan(tuple(links[:12]), dropped=18)
    # A ScrapeJob's rows offer every link: the queue counts the job's pages as a whole.
    assert plan_follow(links, follow(max_pages=12), owned=True) == FollowPlan(tuple(links))


def test_a_page_that_fills_the_link_cap_or_the_budget_says_so_in_its_result() -> None:
    assert follow_dropped(12, 500, 0) == {}
    assert follow_dropped(500, 500, 0) == {"link_cap": 500}
    assert follow_dropped(500, 500, 7) == {"link_cap": 500, "max_pages": 7}


def test_a_classic_crawl_30_links_wide_and_5_deep_queues_exactly_its_max_pages() -> None:
    # Every page links to 30 new pages; the crawl may go 5 deep and queue 100 pages in all.
    root = {"follow": {"selector": "a", "maxDepth": 5, "maxPages": 100}, "extract": {"t": "h1"}}
    pending: list[tuple[dict[str, object], int]] = [(root, 0)]
    queued = 0
    counter = iter(range(10**6))
    while pending:
        payload, depth = pending.pop()
        options = options_from_payload(payload, default_timeout_seconds=30)
        if options.follow is None or depth >= options.follow.max_depth:
            continue
        links = [f"https://shop.example/{next(counter)}" for _ in range(30)]
        plan = plan_follow(links, options.follow, owned=False)
        rows = followed_rows(payload, plan.urls, options.follow, owned=False)
        queued += len(rows)
        pending.extend((dict(row.payload or payload), depth + 1) for row in rows)
    assert queued == 100


def test_followed_rows_of_a_classic_row_carry_what_is_left_of_the_budget() -> None:
    payload = {"follow": {"selector": "a", "maxPages": 7, "extract": {"n": "h1"}}}
    options = options_from_payload(payload, default_timeout_seconds=30)
    assert options.follow is not None
    rows = followed_rows(
        payload, ["https://a.example/1", "https://a.example/2"], options.follow, owned=False
    )
    assert [row.payload for row in rows] == [
        {
            "follow": {"selector": "a", "maxPages": 3, "extract": {"n": "h1"}},
            "extract": {"n": "h1"},
        },
        {
            "follow": {"selector": "a", "maxPages": 2, "extract": {"n": "h1"}},
            "extract": {"n": "h1"},
        },
    ]
    last = followed_rows(
        payload, [f"https://a.example/{n}" for n in range(7)], options.follow, owned=False
    )
    assert all(row.payload == {"extract": {"n": "h1"}} for row in last)
    owned = followed_rows(payload, ["https://a.example/1"], options.follow, owned=True)
    assert owned[0].payload == {**payload, "extract": {"n": "h1"}}


def test_a_labelled_link_becomes_a_row_of_the_labels_parser_and_the_others_keep_the_parents() -> (
    None
):
    parent = {"parser": "shop.listing", "extract": {"name": "h1"}}
    urls = ["https://shop.example/p/1", "https://shop.example/p/2"]
    labels = {"https://shop.example/p/1": "shop.product"}

    owned = followed_rows(parent, urls, follow(), owned=True, labels=labels)
    classic = followed_rows(parent, urls, follow(max_pages=10), owned=False, labels=labels)

    assert owned[0].parser_type == "shop.product"
    assert owned[0].payload == {"extract": {"name": "h1"}}
    assert (owned[1].parser_type, owned[1].payload) == (None, None)
    assert classic[0].parser_type == "shop.product"
    assert classic[0].payload is not None
    assert "parser" not in classic[0].payload
    assert classic[0].payload["follow"]["maxPages"] == 4
    assert classic[1].parser_type is None
    assert classic[1].payload is not None
    assert classic[1].payload["parser"] == "shop.listing"


def test_a_parsers_follow_requests_without_a_follow_option_carry_the_parents_payload() -> None:
    from scrapeq_worker.following import PARSER_FOLLOW

    rows = followed_rows(
        {"parser": "shop.listing"}, ["https://shop.example/p/1"], PARSER_FOLLOW, owned=False
    )

    assert [(row.url, row.payload, row.parser_type) for row in rows] == [
        ("https://shop.example/p/1", None, None)
    ]

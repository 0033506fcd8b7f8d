"""Parsers from the image's packages: which load, which a row gets, and what running one can
end in (docs/parsers.md). The engines and the queue are not involved here; the integration
tests run the same parsers on real pages through a real worker."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from scrapeq_worker.errors import PermanentFailure, RetryLater
from scrapeq_worker.extraction import ExtractedPage, PageOutcome
from scrapeq_worker.metrics import MAX_PARSER_TYPE_LABELS, WorkerMetrics
from scrapeq_worker.parser_api import FollowRequest, Page, ParserResult
from scrapeq_worker.parsers import (
    MAX_FOLLOW_REQUESTS,
    ParserRegistry,
    ParserRunner,
    page_for_parser,
)

from tests.parser_distribution import ENTRY_POINTS, install_parser_distribution

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def parser_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test parser package, installed for this test only (tests/parser_distribution.py)."""
    return install_parser_distribution(tmp_path, monkeypatch)


def a_page(**changes: Any) -> Page:
    outcome = PageOutcome(
        url="http://shop.test/p/1",
        final_url="http://shop.test/p/1?ref=x",
        status=200,
        content_type="text/html",
        extracted=ExtractedPage(
            fields={"price": "9.99"}, title="Laptop", links=["http://shop.test/p/2"]
        ),
        timing_ms={},
        headers={"content-type": "text/html"},
        html='<html><body><h1 class="name">Laptop 1</h1></body></html>',
    )
    for name, value in changes.items():
        setattr(outcome, name, value)
    return page_for_parser(
        outcome, engine="http", parser_type="default", payload={"render": False}, html_limit=100
    )


def runner_with(parsers: dict[str, Any], *, max_result_bytes: int = 10_000) -> ParserRunner:
    return ParserRunner(ParserRegistry(parsers), threads=2, max_result_bytes=max_result_bytes)


# --- loading ---------------------------------------------------------------------------------


def test_every_registered_parser_loads_and_broken_entry_points_are_logged_and_left_out(
    parser_distribution: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="scrapeq_worker.parsers"):
        registry = ParserRegistry.from_entry_points()

    assert set(registry.names) >= set(ENTRY_POINTS)
    assert not {"shop.missing", "shop.not-callable", "default", "bad name!"} & set(registry.names)
    errors = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
    assert "'shop.missing'" in errors
    assert "failed to import" in errors
    assert "'shop.not-callable'" in errors
    assert "not callable" in errors
    assert "'default'" in errors
    assert "'bad name!'" in errors


def test_a_name_two_packages_register_is_left_out(
    parser_distribution: str, tmp_path_factory: pytest.TempPathFactory, monkeypatch: Any
) -> None:
    install_parser_distribution(tmp_path_factory.mktemp("second"), monkeypatch)

    registry = ParserRegistry.from_entry_points()

    assert registry.get("shop.product") is None
    assert registry.names == ()


# --- selection -------------------------------------------------------------------------------


def choose(
    registry: ParserRegistry,
    *,
    payload_parser: str | None = None,
    parser_type: str = "default",
    require: bool = False,
) -> tuple[str | None, list[str]]:
    heard: list[str] = []
    name = registry.choose(
        payload_parser=payload_parser,
        parser_type=parser_type,
        require_registered=require,
        unregistered=heard.append,
    )
    return name, heard


def test_the_payload_parser_wins_over_a_registered_parser_type() -> None:
    registry = ParserRegistry({"list": print, "detail": print})

    assert choose(registry, payload_parser="detail", parser_type="list") == ("detail", [])


def test_a_parser_type_that_names_a_registered_parser_runs_it() -> None:
    assert choose(ParserRegistry({"product_page": print}), parser_type="product_page") == (
        "product_page",
        [],
    )


def test_an_unregistered_parser_type_is_heard_of_and_the_declarative_payload_decides() -> None:
    assert choose(ParserRegistry({"list": print}), parser_type="product_page") == (
        None,
        ["product_page"],
    )


def test_default_is_the_declarative_extraction_even_on_a_pool_that_requires_parsers() -> None:
    assert choose(ParserRegistry({"list": print}), parser_type="default", require=True) == (
        None,
        [],
    )
    assert choose(
        ParserRegistry({"list": print}), payload_parser="default", parser_type="x", require=True
    ) == (None, [])


def test_a_pool_that_requires_parsers_fails_an_unregistered_parser_type_naming_the_known_ones() -> (
    None
):
    with pytest.raises(PermanentFailure) as raised:
        choose(ParserRegistry({"list": print, "detail": print}), parser_type="pp", require=True)

    assert raised.value.reason == "unknown_parser"
    assert "'pp'" in raised.value.message
    assert "registered parsers: detail, list" in raised.value.message


def test_a_payload_parser_this_worker_lacks_fails_unknown_parser() -> None:
    with pytest.raises(PermanentFailure) as raised:
        choose(ParserRegistry(), payload_parser="shop.product")

    assert raised.value.reason == "unknown_parser"
    assert "the payload's parser 'shop.product'" in raised.value.message
    assert "registered parsers: none" in raised.value.message


def test_unregistered_parser_types_are_counted_under_a_bounded_set_of_labels_and_logged_once() -> (
    None
):
    metrics = WorkerMetrics()

    first = metrics.count_unregistered_parser_type("q", "product_page")
    again = metrics.count_unregistered_parser_type("q", "product_page")
    for number in range(MAX_PARSER_TYPE_LABELS + 10):
        metrics.count_unregistered_parser_type("q", f"id-{number}")

    assert (first, again) == (True, False)
    samples = {
        sample.labels["parser_type"]: sample.value
        for metric in metrics.unregistered_parser_types.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }
    assert samples["product_page"] == 2
    assert len(samples) == MAX_PARSER_TYPE_LABELS + 1
    assert samples["other"] == 11


# --- running ---------------------------------------------------------------------------------


async def test_a_sync_parser_runs_in_a_thread_and_sees_the_page() -> None:
    seen: dict[str, Any] = {}

    def parser(page: Page) -> ParserResult:
        seen["thread"] = threading.current_thread().name
        return ParserResult(
            data={"url": page.final_url, "price": page.fields["price"], "html": page.html},
            follow=[FollowRequest("http://shop.test/p/2", label="detail")],
        )

    parsed = await runner_with({"p": parser}).run("p", a_page(), timeout_seconds=5)

    assert seen["thread"].startswith("scrapeq-parser")
    assert parsed.data["url"] == "http://shop.test/p/1?ref=x"
    assert parsed.data["price"] == "9.99"
    assert "Laptop 1" in parsed.data["html"]
    assert parsed.follow == (FollowRequest("http://shop.test/p/2", label="detail"),)


async def test_an_async_parser_runs_on_the_loop_and_may_return_only_its_data() -> None:
    async def parser(page: Page) -> dict[str, Any]:
        return {"title": page.title}

    parsed = await runner_with({"p": parser}).run("p", a_page(), timeout_seconds=5)

    assert parsed.data == {"title": "Laptop"}
    assert parsed.follow == ()


@pytest.mark.parametrize("raised", [ValueError("no price"), SystemExit(3), KeyboardInterrupt()])
async def test_whatever_a_parser_raises_is_the_rows_parser_error(raised: BaseException) -> None:
    def sync_parser(page: Page) -> dict[str, Any]:
        raise raised

    async def async_parser(page: Page) -> dict[str, Any]:
        raise raised

    runner = runner_with({"sync": sync_parser, "async": async_parser})
    for name in ("sync", "async"):
        with pytest.raises(PermanentFailure) as failure:
            await runner.run(name, a_page(), timeout_seconds=5)
        assert failure.value.reason == "parser_error"
        assert f"parser {name!r} raised {type(raised).__name__}" in failure.value.message


async def test_a_parser_that_asks_for_a_retry_is_retried_after_its_delay() -> None:
    from scrapeq_worker.parser_api import RetryPage

    def parser(page: Page) -> dict[str, Any]:
        raise RetryPage("placeholder page", delay_seconds=30)

    with pytest.raises(RetryLater) as retry:
        await runner_with({"p": parser}).run("p", a_page(), timeout_seconds=5)

    assert (retry.value.reason, retry.value.delay_seconds) == ("parser_retry", 30)
    assert "placeholder page" in retry.value.message


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ({"when": object()}, "not JSON"),
        ({"number": float("nan")}, "not JSON"),
        (["a"], "returned list, not a JSON object"),
        ({"blob": "x" * 20_000}, "more than the 10000-byte result limit"),
        (ParserResult({}, follow=["http://shop.test/"]), "not a FollowRequest"),  # type: ignore[list-item]
        (ParserResult({}, follow=[FollowRequest("http://x/", label="a b")]), "not a parser name"),
    ],
)
async def test_a_result_that_is_not_a_small_json_object_is_a_clear_error(
    output: Any, says: str
) -> None:
    with pytest.raises(PermanentFailure) as failure:
        await runner_with({"p": lambda page: output}).run("p", a_page(), timeout_seconds=5)

    assert failure.value.reason == "parser_result_invalid"
    assert says in failure.value.message


async def test_follow_requests_past_the_cap_are_counted_not_kept() -> None:
    requests = [FollowRequest(f"http://shop.test/{n}") for n in range(MAX_FOLLOW_REQUESTS + 3)]

    parsed = await runner_with({"p": lambda page: ParserResult({}, requests)}).run(
        "p", a_page(), timeout_seconds=5
    )

    assert len(parsed.follow) == MAX_FOLLOW_REQUESTS
    assert parsed.dropped == 3


async def test_a_sync_parser_past_the_jobs_timeout_fails_its_row_and_the_runner_goes_on() -> None:
    release = threading.Event()

    def stuck(page: Page) -> dict[str, Any]:
        release.wait(10)
        return {}

    runner = runner_with({"stuck": stuck, "quick": lambda page: {"ok": True}})
    try:
        with pytest.raises(PermanentFailure) as failure:
            await runner.run("stuck", a_page(), timeout_seconds=0.2)
        parsed = await runner.run("quick", a_page(), timeout_seconds=5)
    finally:
        release.set()
        runner.close()

    assert failure.value.reason == "parser_timeout"
    assert "0.2s" in failure.value.message
    assert parsed.data == {"ok": True}

"""The example parser package (examples/parser-package) registers what its pyproject says and its
parsers work on a page: its entry points are read from its own pyproject.toml into a dist-info
of a temporary directory, as pip would install them."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from scrapeq_worker.extraction import ExtractedPage, PageOutcome
from scrapeq_worker.parser_api import FollowRequest, RetryPage
from scrapeq_worker.parsers import ParserRegistry, ParserRunner, page_for_parser

pytestmark = pytest.mark.timeout(30)

PACKAGE = Path(__file__).resolve().parents[3] / "examples" / "parser-package"

PRODUCT_HTML = """<!doctype html><html><head><title>Laptop</title>
<script type="application/ld+json">
{"@type": "Product", "name": "Laptop 14", "offers": {"price": "1299.00", "priceCurrency": "EUR"}}
</script></head><body><h1>Laptop 14</h1></body></html>"""


@pytest.fixture
def example_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ParserRegistry:
    project = tomllib.loads((PACKAGE / "pyproject.toml").read_text())
    entry_points = project["project"]["entry-points"]["scrapeq.parsers"]
    dist_info = tmp_path / "shop_parsers-1.0.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: shop-parsers\nVersion: 1.0.0\n"
    )
    lines = [f"{name} = {target}" for name, target in entry_points.items()]
    (dist_info / "entry_points.txt").write_text("[scrapeq.parsers]\n" + "\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(PACKAGE / "src"))
    monkeypatch.delitem(sys.modules, "shop_parsers", raising=False)
    return ParserRegistry.from_entry_points()


def outcome(url: str, html: str, *, links: list[str], title: str) -> PageOutcome:
    return PageOutcome(
        url=url,
        final_url=url,
        status=200,
        content_type="text/html",
        extracted=ExtractedPage(title=title, links=links),
        timing_ms={},
        headers={"content-type": "text/html"},
        html=html,
    )


async def test_the_example_registers_a_listing_and_a_product_parser_that_work_together(
    example_registry: ParserRegistry,
) -> None:
    assert {"shop.listing", "shop.product"} <= set(example_registry.names)
    runner = ParserRunner(example_registry, threads=1, max_result_bytes=10_000)
    try:
        listing = await runner.run(
            "shop.listing",
            page_for_parser(
                outcome(
                    "https://shop.example/laptops",
                    "<html><body>laptops</body></html>",
                    links=["https://shop.example/product/14", "https://shop.example/about"],
                    title="Laptops",
                ),
                engine="browser",
                parser_type="shop.listing",
                payload={},
                html_limit=1000,
            ),
            timeout_seconds=5,
        )
        product = await runner.run(
            "shop.product",
            page_for_parser(
                outcome("https://shop.example/product/14", PRODUCT_HTML, links=[], title="Laptop"),
                engine="browser",
                parser_type="shop.product",
                payload={},
                html_limit=1000,
            ),
            timeout_seconds=5,
        )
    finally:
        runner.close()

    assert listing.data == {"category": "Laptops", "products": 1}
    assert listing.follow == (
        FollowRequest("https://shop.example/product/14", label="shop.product"),
    )
    assert product.data == {
        "name": "Laptop 14",
        "price": "1299.00",
        "currency": "EUR",
        "url": "https://shop.example/product/14",
    }


async def test_the_example_listing_parser_retries_the_shops_waiting_room(
    example_registry: ParserRegistry,
) -> None:
    parser = example_registry.get("shop.listing")
    assert parser is not None
    page = page_for_parser(
        outcome("https://shop.example/", "<p>Please wait</p>", links=[], title="Queue"),
        engine="http",
        parser_type="shop.listing",
        payload={},
        html_limit=1000,
    )

    with pytest.raises(RetryPage):
        parser(page)

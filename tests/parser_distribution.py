"""A parser package for tests, installed the way an image installs one but only for one test:
a module and its `.dist-info` (with `entry_points.txt`) in a temporary directory put first on
sys.path, so `importlib.metadata` finds its `scrapeq.parsers` entry points. Nothing is
installed into the environment.
"""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

# The test parsers. Each reads the page the way a team's parser would: from the HTML and from
# what the declarative spec extracted.
PARSERS_MODULE = """
import asyncio
import re
import time

from scrapeq_worker.parser_api import FollowRequest, Page, ParserResult, RetryPage


def _heading(page: Page) -> str | None:
    match = re.search(r'<h1 class="name">([^<]*)</h1>', page.html or "")
    return match.group(1) if match else None


def product(page: Page) -> ParserResult:
    return ParserResult(
        data={
            "kind": "product",
            "heading": _heading(page),
            "title": page.title,
            "price": page.fields.get("price"),
            "status": page.status,
            "engine": page.engine,
            "final_url": page.final_url,
            "content_type": page.headers.get("content-type"),
            "parser_type": page.parser_type,
            "html_truncated": page.html_truncated,
        },
        follow=[
            FollowRequest(link, label="detail")
            for link in page.links
            if "/js/" in link or "/static/" in link
        ]
        + [FollowRequest("http://elsewhere.example/page", label="detail")],
    )


async def async_product(page: Page) -> dict[str, object]:
    await asyncio.sleep(0)
    return {"kind": "async", "heading": _heading(page), "engine": page.engine}


def detail(page: Page) -> dict[str, object]:
    return {"kind": "detail", "heading": _heading(page), "parser_type": page.parser_type}


def broken(page: Page) -> dict[str, object]:
    raise ValueError(f"no price on {page.url}")


def exits(page: Page) -> dict[str, object]:
    raise SystemExit(3)


def not_json(page: Page) -> dict[str, object]:
    return {"when": object()}


def too_large(page: Page) -> dict[str, object]:
    return {"blob": "x" * 2_000_000}


def not_a_mapping(page: Page) -> list[str]:
    return ["a", "list"]


def retry(page: Page) -> dict[str, object]:
    raise RetryPage("the shop served its queue page", delay_seconds=30)


def slow(page: Page) -> dict[str, object]:
    # Stands for a parser stuck in a slow computation: longer than the job's timeout.
    time.sleep(8)
    return {"kind": "slow"}


async def reveal(page: Page) -> dict[str, object]:
    # Acts on the live page: the price exists only after the button is clicked.
    if page.actions is None:
        return {"kind": "reveal", "actions": False, "price": page.fields.get("price")}
    before = await page.actions.extract({"price": ".price"})
    report = await page.actions.click("button.reveal", wait_for=".price")
    after = await page.actions.extract(
        {"price": ".price"}, items={"selector": "li.tag", "fields": {"tag": ""}}
    )
    html = await page.actions.html() or ""
    return {
        "kind": "reveal",
        "actions": True,
        "before": before["fields"]["price"],
        "price": after["fields"]["price"],
        "tags": [item["tag"] for item in after["items"]],
        "price_in_html": 'class="price"' in html,
        "click": report,
    }


async def wander(page: Page) -> dict[str, object]:
    # A click that navigates to an address the worker's guard refuses.
    assert page.actions is not None
    await page.actions.click("a.away", wait_for_navigation=True)
    return {"kind": "wander"}


async def bad_steps(page: Page) -> dict[str, object]:
    assert page.actions is not None
    await page.actions.run_steps([{"action": "evaluate", "script": "alert(1)"}])
    return {"kind": "bad-steps"}


NOT_CALLABLE = 42
"""

ENTRY_POINTS: Mapping[str, str] = {
    "shop.product": "product",
    "shop.async": "async_product",
    "detail": "detail",
    "shop.broken": "broken",
    "shop.exits": "exits",
    "shop.not-json": "not_json",
    "shop.too-large": "too_large",
    "shop.not-a-mapping": "not_a_mapping",
    "shop.retry": "retry",
    "shop.slow": "slow",
    "shop.reveal": "reveal",
    "shop.wander": "wander",
    "shop.bad-steps": "bad_steps",
}
# Entry points that must be left out, each for its own reason.
BROKEN_ENTRY_POINTS: Mapping[str, str] = {
    "shop.missing": "scrapeq_no_such_module:parse",
    "shop.not-callable": "{module}:NOT_CALLABLE",
    "default": "{module}:product",
    "bad name!": "{module}:product",
}

_numbers = itertools.count()


def write_parser_distribution(directory: Path) -> str:
    """Write the test parser package into `directory` (a module and its dist-info, as pip
    installs them); returns the module's name, unique per call so no earlier copy is reused.
    A process finds its parsers with `directory` on sys.path (or PYTHONPATH)."""
    module = f"scrapeq_test_parsers_{next(_numbers)}"
    (directory / f"{module}.py").write_text(textwrap.dedent(PARSERS_MODULE))
    dist_info = directory / f"{module}-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 1.0\n"
    )
    lines = ["[scrapeq.parsers]"]
    lines += [f"{name} = {module}:{attribute}" for name, attribute in ENTRY_POINTS.items()]
    lines += [
        f"{name} = {target.format(module=module)}" for name, target in BROKEN_ENTRY_POINTS.items()
    ]
    (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return module


def install_parser_distribution(directory: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Write the test parser package into `directory` and put it first on sys.path for this
    test; returns the module's name."""
    module = write_parser_distribution(directory)
    monkeypatch.syspath_prepend(str(directory))
    return module

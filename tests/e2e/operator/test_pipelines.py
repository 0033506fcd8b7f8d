"""Crawls and pipelines end to end: kubectl apply -> operator -> rows -> a real `scrapeq worker`
rendering a multi-level loopback shop in real Chromium -> the rows and status show the outcome.

- a category -> product crawl with `follow` scrapes every product exactly once, with the
  product fields from `follow.extract`, stops at maxDepth and at the job-wide maxPages;
- a ScrapeJob with `dependsOn: [a]` is Blocked (and has no rows) until `a` has Succeeded;
  `urlsFrom.scrapeJob` takes the URLs an upstream job extracted;
- a dependency cycle is rejected with the cycle spelled out, and a job naming itself is
  refused by the API server.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from tests.e2e.operator.operator_parts import (
    Kubectl,
    OperatorProcess,
    WorkerProcesses,
    loopback_site,
    owner_progress,
    scrapejob,
    work_rows,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres, pytest.mark.chromium]

CATEGORIES = {1: "Laptops", 2: "Phones"}
PRODUCTS_PER_CATEGORY = 3


def product_name(category: int, number: int) -> str:
    return f"{CATEGORIES[category]} model {number}"


def product_price(category: int, number: int) -> str:
    return f"{category * 100 + number}.99"


def _page(title: str, body: str) -> bytes:
    return (
        f"<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>"
    ).encode()


def shop_page(path: str) -> bytes | None:
    """The shop: home -> categories -> products -> related pages (one level too deep).

    Product names and prices are written by a script, so only a rendering browser sees them.
    """
    if path == "/":
        links = "".join(
            f'<a class="category" href="/category/{number}">{name}</a>'
            for number, name in CATEGORIES.items()
        )
        return _page(
            "Shop",
            f'<h1>Shop</h1>{links}<a href="/about">About</a>'
            '<a href="http://elsewhere.invalid/category/9">Partner shop</a>',
        )
    match = re.fullmatch(r"/category/(\d)", path)
    if match and int(match[1]) in CATEGORIES:
        category = int(match[1])
        links = "".join(
            f'<a class="product" href="/product/{category}-{number}">item</a>'
            f'<a class="product" href="/product/{category}-{number}#reviews">reviews</a>'
            for number in range(1, PRODUCTS_PER_CATEGORY + 1)
        )
        return _page(
            CATEGORIES[category], f'<h1>{CATEGORIES[category]}</h1>{links}<a href="/">Home</a>'
        )
    match = re.fullmatch(r"/product/(\d)-(\d)", path)
    if match:
        category, number = int(match[1]), int(match[2])
        script = (
            "<script>document.querySelector('h1').textContent = "
            f"'{product_name(category, number)}'; document.querySelector('.price').textContent"
            f" = '{product_price(category, number)}';</script>"
        )
        return _page(
            "Product",
            '<h1>loading</h1><span class="price"></span>'
            f'<a href="/product/{category}-{number}/related">Related</a>{script}',
        )
    if re.fullmatch(r"/product/\d-\d/related", path) or path == "/about":
        return _page("Other", "<h1>Other</h1>")
    return None


@pytest.fixture(autouse=True)
def delete_scrapejobs_at_the_end(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> Iterator[None]:
    """Delete this test's ScrapeJobs while its operator and database still exist (the
    finalizer needs both): a job left Blocked would be re-checked every second by any later
    cluster-wide operator."""
    del empty_database_url  # requested so that it is dropped only after this teardown
    yield
    kubectl.run("delete", "scrapejobs", "--all", "-n", namespace, "--timeout=60s", check=False)


@pytest.fixture
def shop() -> Iterator[str]:
    with loopback_site(shop_page) as url:
        yield url


@pytest.fixture
def start_worker(
    workers: WorkerProcesses, empty_database_url: str, chromium_executable: str
) -> Callable[[], subprocess.Popen[bytes]]:
    """Start a long-running worker rendering with the test's Chromium."""

    def start() -> subprocess.Popen[bytes]:
        return workers.start(
            empty_database_url,
            "--concurrency",
            "4",
            environment={"SCRAPEQ_CHROMIUM": chromium_executable},
        )

    return start


def rows_of(database_url: str, uid: str) -> list[dict[str, Any]]:
    with psycopg.connect(database_url, row_factory=psycopg.rows.dict_row) as connection:
        return connection.execute(
            "SELECT id, url_to_scrape, status::text AS status, depth, result, created_at, "
            "finished_at FROM scraping_jobs WHERE owner_uid = %s ORDER BY id",
            (uid,),
        ).fetchall()


def phase_of(kubectl: Kubectl, name: str, namespace: str) -> str:
    return str(kubectl.get("scrapejob", name, namespace).get("status", {}).get("phase", ""))


def wait_for_phase(
    kubectl: Kubectl, namespace: str, names: list[str], phase: str, *, timeout: float
) -> None:
    eventually_blocking(
        lambda: {phase_of(kubectl, name, namespace) for name in names} == {phase},
        within=timeout,
        what=f"{', '.join(names)} {phase}",
    )


def condition(kubectl: Kubectl, name: str, namespace: str, kind: str) -> dict[str, Any]:
    status = kubectl.get("scrapejob", name, namespace).get("status", {})
    for item in status.get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return {}


def apply_all(kubectl: Kubectl, namespace: str, *manifests: dict[str, Any]) -> None:
    for manifest in manifests:
        manifest["metadata"]["namespace"] = namespace
        kubectl.apply(manifest)


def uid_of(kubectl: Kubectl, name: str, namespace: str) -> str:
    return str(kubectl.get("scrapejob", name, namespace)["metadata"]["uid"])


@pytest.mark.timeout(300)
def test_a_category_to_product_crawl_scrapes_every_product_once_within_depth_and_page_caps(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    start_worker: Callable[[], subprocess.Popen[bytes]],
    shop: str,
) -> None:
    operator_factory(empty_database_url)
    follow = {
        "selector": "a",
        "maxDepth": 2,
        "include": ["/category/", "/product/"],
        "extract": {"name": {"selector": "h1"}, "price": {"selector": ".price"}},
    }
    crawl = scrapejob("crawl", url=shop + "/", extract={"title": {"selector": "h1"}}, follow=follow)
    capped = scrapejob(
        "capped",
        url=shop + "/",
        extract={"title": {"selector": "h1"}},
        follow={**follow, "maxPages": 4},
    )
    apply_all(kubectl, namespace, crawl, capped)
    start_worker()

    wait_for_phase(kubectl, namespace, ["crawl", "capped"], "Succeeded", timeout=200)

    rows = rows_of(empty_database_url, uid_of(kubectl, "crawl", namespace))
    by_url = {row["url_to_scrape"].removeprefix(shop): row for row in rows}
    products = {
        f"/product/{category}-{number}": (category, number)
        for category in CATEGORIES
        for number in range(1, PRODUCTS_PER_CATEGORY + 1)
    }
    # Exactly the home page, the categories and each product once: no duplicate from the
    # #reviews links, no /about (include), no other host (sameHost), no /related (maxDepth).
    assert len(rows) == len(by_url)
    assert set(by_url) == {"/", "/category/1", "/category/2", *products}
    assert {row["status"] for row in rows} == {"completed"}
    assert {path: by_url[path]["depth"] for path in ("/", "/category/1", "/category/2")} == {
        "/": 0,
        "/category/1": 1,
        "/category/2": 1,
    }
    for path, (category, number) in products.items():
        row = by_url[path]
        assert row["depth"] == 2
        assert row["result"]["fields"] == {
            "name": product_name(category, number),
            "price": product_price(category, number),
        }
    assert by_url["/"]["result"]["fields"] == {"title": "Shop"}
    table = kubectl.run("get", "scrapejobs", "-n", namespace).stdout
    assert re.search(rf"crawl\s+Succeeded\s+{len(rows)}/{len(rows)}\s+0", table), table

    capped_rows = rows_of(empty_database_url, uid_of(kubectl, "capped", namespace))
    assert len([row for row in capped_rows if row["depth"] > 0]) == 4
    assert owner_progress(empty_database_url, uid_of(kubectl, "capped", namespace)).total == 5


@pytest.mark.timeout(300)
def test_a_dependent_job_waits_for_its_dependency_and_takes_its_extracted_urls(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    start_worker: Callable[[], subprocess.Popen[bytes]],
    shop: str,
) -> None:
    operator_factory(empty_database_url)
    categories = scrapejob(
        "categories",
        urls=[shop + "/category/1", shop + "/category/2"],
        render=False,
        extract={"products": {"selector": "a.product", "attribute": "href", "all": True}},
    )
    report = scrapejob("report", url=shop + "/about", render=False, dependsOn=["categories"])
    products = scrapejob(
        "products",
        urlsFrom={"scrapeJob": "categories", "field": "products"},
        extract={"name": {"selector": "h1"}},
    )
    # The dependents first: their dependency does not even exist yet.
    apply_all(kubectl, namespace, report, products)
    blocked = eventually_blocking(
        lambda: condition(kubectl, "report", namespace, "Blocked"),
        within=30,
        what="report Blocked",
    )
    assert blocked["status"] == "True"
    assert "categories (not found)" in blocked["message"]
    assert phase_of(kubectl, "report", namespace) == "Pending"
    assert rows_of(empty_database_url, uid_of(kubectl, "report", namespace)) == []

    apply_all(kubectl, namespace, categories)
    start_worker()
    wait_for_phase(kubectl, namespace, ["report", "products"], "Succeeded", timeout=200)

    upstream = rows_of(empty_database_url, uid_of(kubectl, "categories", namespace))
    downstream = rows_of(empty_database_url, uid_of(kubectl, "report", namespace))
    taken = rows_of(empty_database_url, uid_of(kubectl, "products", namespace))
    finished = max(row["finished_at"] for row in upstream)
    assert min(row["created_at"] for row in [*downstream, *taken]) >= finished
    # The product links of both categories, fragments dropped, each once, rendered.
    assert sorted(row["url_to_scrape"] for row in taken) == sorted(
        f"{shop}/product/{category}-{number}"
        for category in CATEGORIES
        for number in range(1, PRODUCTS_PER_CATEGORY + 1)
    )
    assert {row["result"]["fields"]["name"] for row in taken} == {
        product_name(category, number)
        for category in CATEGORIES
        for number in range(1, PRODUCTS_PER_CATEGORY + 1)
    }
    unblocked = condition(kubectl, "report", namespace, "Blocked")
    assert unblocked["status"] == "False"


@pytest.mark.timeout(180)
def test_a_dependency_cycle_is_rejected_and_a_job_cannot_depend_on_itself(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    shop: str,
) -> None:
    operator_factory(empty_database_url)
    first = scrapejob("first", url=shop + "/", render=False, dependsOn=["second"])
    second = scrapejob("second", url=shop + "/", render=False, dependsOn=["first"])
    apply_all(kubectl, namespace, first)
    eventually_blocking(
        lambda: condition(kubectl, "first", namespace, "Blocked").get("status") == "True",
        within=30,
        what="first Blocked on second",
    )
    apply_all(kubectl, namespace, second)

    wait_for_phase(kubectl, namespace, ["first", "second"], "Failed", timeout=60)
    ready = condition(kubectl, "second", namespace, "Ready")
    assert ready["reason"] == "DependencyCycle"
    assert "second -> first -> second" in ready["message"]
    assert condition(kubectl, "first", namespace, "Ready")["reason"] in {
        "DependencyCycle",
        "DependencyFailed",
    }
    for name in ("first", "second"):
        assert rows_of(empty_database_url, uid_of(kubectl, name, namespace)) == []
    events = kubectl.run(
        "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=second"
    ).stdout
    assert "DependencyCycle" in events

    selfish = scrapejob("selfish", url=shop + "/", dependsOn=["selfish"])
    selfish["metadata"]["namespace"] = namespace
    refused = kubectl.apply(selfish, check=False)
    assert refused.returncode != 0
    assert "cannot depend on itself" in refused.stderr


@pytest.mark.timeout(180)
def test_a_failed_dependency_fails_the_job_or_keeps_it_blocked_as_its_policy_says(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    shop: str,
) -> None:
    operator_factory(empty_database_url)
    upstream = scrapejob("upstream", url=shop + "/", render=False, retries={"limit": 0})
    strict = scrapejob("strict", url=shop + "/about", render=False, dependsOn=["upstream"])
    patient = scrapejob(
        "patient",
        url=shop + "/about",
        render=False,
        dependsOn=["upstream"],
        onDependencyFailure="Wait",
    )
    apply_all(kubectl, namespace, upstream, strict, patient)
    uid = uid_of(kubectl, "upstream", namespace)
    eventually_blocking(
        lambda: owner_progress(empty_database_url, uid).total == 1, within=30, what="a row"
    )
    # Act as the worker: the upstream page fails for good.
    work_rows(empty_database_url, fail_with="HTTP 500 from the shop")
    wait_for_phase(kubectl, namespace, ["upstream", "strict"], "Failed", timeout=60)

    ready = condition(kubectl, "strict", namespace, "Ready")
    assert ready["reason"] == "DependencyFailed"
    assert "upstream (Failed)" in ready["message"]
    blocked = eventually_blocking(
        lambda: condition(kubectl, "patient", namespace, "Blocked"),
        within=30,
        what="patient Blocked",
    )
    assert blocked["status"] == "True"
    assert "upstream (Failed)" in blocked["message"]
    assert phase_of(kubectl, "patient", namespace) == "Pending"
    for name in ("strict", "patient"):
        assert rows_of(empty_database_url, uid_of(kubectl, name, namespace)) == []


@pytest.mark.timeout(120)
def test_a_payload_the_worker_would_refuse_fails_the_job_before_anything_is_queued(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    shop: str,
) -> None:
    operator_factory(empty_database_url)
    invalid = scrapejob(
        "invalid",
        url=shop + "/",
        payload={"colour": "blue"},
        follow={"selector": "a", "include": ["(unclosed"]},
    )
    apply_all(kubectl, namespace, invalid)

    wait_for_phase(kubectl, namespace, ["invalid"], "Failed", timeout=60)
    ready = condition(kubectl, "invalid", namespace, "Ready")
    assert ready["reason"] == "InvalidSpec"
    assert "unknown payload option 'colour'" in ready["message"]
    assert "follow.include[0] '(unclosed' is not a valid regular expression" in ready["message"]
    assert rows_of(empty_database_url, uid_of(kubectl, "invalid", namespace)) == []


@pytest.mark.timeout(120)
def test_a_payload_past_a_bound_fails_the_job_with_the_words_a_worker_would_use(
    kubectl: Kubectl,
    namespace: str,
    empty_database_url: str,
    operator_factory: Callable[..., OperatorProcess],
    shop: str,
) -> None:
    operator_factory(empty_database_url)
    nested: object = []
    for _ in range(40):
        nested = [nested]
    hostile = scrapejob(
        "hostile",
        url=shop + "/",
        payload={"headers": {"X-A": "one\r\nX-B: two", "Bad Name": "v"}, "deep": nested},
    )
    apply_all(kubectl, namespace, hostile)

    wait_for_phase(kubectl, namespace, ["hostile"], "Failed", timeout=60)
    ready = condition(kubectl, "hostile", namespace, "Ready")
    assert ready["reason"] == "InvalidSpec"
    assert ready["message"] == "payload nests objects and arrays deeper than 32 levels"
    assert rows_of(empty_database_url, uid_of(kubectl, "hostile", namespace)) == []

    shallow = scrapejob(
        "headers", url=shop + "/", payload={"headers": {"X-A": "one\r\nX-B: two", "Bad Name": "v"}}
    )
    apply_all(kubectl, namespace, shallow)
    wait_for_phase(kubectl, namespace, ["headers"], "Failed", timeout=60)
    message = condition(kubectl, "headers", namespace, "Ready")["message"]
    assert (
        "header 'X-A' must have a value of at most 8192 characters without line breaks" in message
    )
    assert "header name 'Bad Name' must be 1-256 letters, digits" in message

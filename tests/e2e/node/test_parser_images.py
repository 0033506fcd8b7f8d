"""A team's parsers on real Pods: examples/parser-package built into an image FROM the worker
image, loaded into the node and run by a release's worker pool. A ScrapeJob naming a parser and
a classic INSERT naming one by parser_type get the parser's results; a producer's own
parser_type label completes as before; a parser no worker has gets UnknownParser within 30 s."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from scrapeq.local.images import build_recipes, derived_worker_recipe, load_images, project_version
from scrapeq.local.node import LocalNode
from scrapeq.local.release import (
    Release,
    SitePage,
    install_release,
    pod_network_site,
    uninstall_release,
)
from tests.e2e.node.node_parts import succeeded
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.node, pytest.mark.helm, pytest.mark.timeout(900)]

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "parser-package"
IMAGE_REPOSITORY = "scrapeq/shop-worker"
PRODUCTS = {"alpha": ("Alpha laptop", "999.00"), "beta": ("Beta laptop", "1299.00")}
# How soon a ScrapeJob naming a parser no worker has says so (the bound).
UNKNOWN_PARSER_WITHIN_SECONDS = 30


def shop_page(path: str) -> SitePage:
    """A category page listing the products, and product pages carrying JSON-LD."""
    if path == "/category/laptops":
        links = "".join(f'<a href="/products/{slug}">{slug}</a>' for slug in PRODUCTS)
        return SitePage(
            body=f"<html><head><title>Laptops</title></head><body>{links}</body></html>"
        )
    slug = urlsplit(path).path.rsplit("/", 1)[-1]
    if slug not in PRODUCTS:
        return SitePage(body=f"<html><head><title>{slug}</title></head><body>plain</body></html>")
    name, price = PRODUCTS[slug]
    data = {"@type": "Product", "name": name, "offers": {"price": price, "priceCurrency": "EUR"}}
    return SitePage(
        body=f"<html><head><title>{slug}</title>"
        f'<script type="application/ld+json">{json.dumps(data)}</script></head>'
        f"<body><h1>{slug}</h1></body></html>"
    )


def apply(release: Release, name: str, spec: dict[str, object]) -> None:
    manifest = {
        "apiVersion": "scrapeq.io/v1alpha1",
        "kind": "ScrapeJob",
        "metadata": {"name": name, "namespace": release.namespace},
        "spec": spec,
    }
    release.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))


def test_a_pool_on_an_image_built_from_the_worker_image_runs_its_parsers(
    kube_node: LocalNode, helm_binary: Path
) -> None:
    recipe = derived_worker_recipe(
        "shop-worker",
        EXAMPLE / "Containerfile",
        f"docker.io/{IMAGE_REPOSITORY}:{project_version()}",
    )
    load_images(build_recipes([recipe]), kube_node.containerd_address)
    release = install_release(
        kube_node,
        helm_binary,
        name="parsers",
        namespace="scrapeq-parsers",
        values=[f"workers.image.repository={IMAGE_REPOSITORY}"],
    )
    try:
        with pod_network_site(shop_page) as (site, _requested):
            apply(release, "laptops", {"url": f"{site}/category/laptops", "parser": "shop.listing"})
            succeeded(release, "laptops")
            rows = release.sql(
                "SELECT url_to_scrape, parser_type, result->>'parser', result->'data'"
                " FROM scraping_jobs WHERE owner_name = 'laptops' AND owner_namespace = %s",
                release.namespace,
            )
            by_url = {row[0].removeprefix(site): row[1:] for row in rows}
            assert by_url["/category/laptops"][1:] == (
                "shop.listing",
                {"category": "Laptops", "products": len(PRODUCTS)},
            )
            for slug, (name, price) in PRODUCTS.items():
                # The listing's follow requests carry the label: the product parser ran.
                assert by_url[f"/products/{slug}"] == (
                    "shop.product",
                    "shop.product",
                    {
                        "name": name,
                        "price": price,
                        "currency": "EUR",
                        "url": f"{site}/products/{slug}",
                    },
                )

            # Plain INSERTs, as a classic producer writes them: one names a registered parser
            # by parser_type, one carries the producer's own label.
            [(named,)] = release.sql(
                "INSERT INTO scraping_jobs (url_to_scrape, parser_type) VALUES (%s, %s)"
                " RETURNING id",
                f"{site}/products/alpha?classic",
                "shop.product",
            )
            [(labelled,)] = release.sql(
                "INSERT INTO scraping_jobs (url_to_scrape, parser_type) VALUES (%s, %s)"
                " RETURNING id",
                f"{site}/products/plain-page",
                "product_page",
            )

            def finished() -> dict[int, tuple[object, ...]] | None:
                found = release.sql(
                    "SELECT id, status::text, result->>'parser', result->'data'->>'name',"
                    " result->>'title' FROM scraping_jobs WHERE id = ANY(%s)",
                    [named, labelled],
                )
                done = {row[0]: row[1:] for row in found}
                return done if all(row[0] == "completed" for row in done.values()) else None

            done = eventually_blocking(
                finished, within=300, what="the two classic rows to complete", every=1
            )
            assert done[named] == ("completed", "shop.product", "Alpha laptop", "alpha")
            # A producer's own label: the declarative payload decided, as before parsers.
            assert done[labelled] == ("completed", None, None, "plain-page")

        # Once a worker of the queue has published its parsers, a parser none has is reported
        # on the ScrapeJob instead of failing its rows. A worker claims nothing before its
        # first publication, but one that started while the database was still coming up
        # publishes on a retry; a job applied before any publication is queued, since the
        # operator cannot tell (docs/parsers.md, "Publication").
        eventually_blocking(
            lambda: release.sql(
                "SELECT worker_id FROM scrapeq_worker_parsers WHERE queue = 'default'"
            ),
            within=60,
            what="a worker of the queue to publish its parsers",
            every=0.5,
        )
        apply(release, "reviews", {"url": "https://shop.test/reviews", "parser": "shop.reviews"})

        def unknown_parser() -> dict[str, object] | None:
            conditions = release.scrapejob_status("reviews").get("conditions") or []
            return next(
                (
                    condition
                    for condition in conditions
                    if condition.get("reason") == "UnknownParser" and condition["status"] == "False"
                ),
                None,
            )

        try:
            condition = eventually_blocking(
                unknown_parser,
                within=UNKNOWN_PARSER_WITHIN_SECONDS,
                what="the UnknownParser condition",
                every=0.5,
            )
        except AssertionError as error:
            raise AssertionError(f"{error}\n{diagnosis(release, 'reviews')}") from error
        assert "shop.reviews" in str(condition["message"])
        assert "shop.listing" in str(condition["message"])
        assert not release.sql(
            "SELECT id FROM scraping_jobs WHERE owner_name = 'reviews' AND owner_namespace = %s",
            release.namespace,
        )
    finally:
        uninstall_release(release)


def diagnosis(release: Release, name: str) -> str:
    """What the ScrapeJob, the workers' publications and the operator say, for a failure."""
    status = json.dumps(release.scrapejob_status(name), indent=1)
    published = release.sql("SELECT * FROM scrapeq_worker_parsers")
    rows = release.sql(
        "SELECT id, status::text, last_error_reason FROM scraping_jobs"
        " WHERE owner_name = %s AND owner_namespace = %s",
        name,
        release.namespace,
    )
    pods = release.kubectl("get", "pods", "-n", release.namespace, "-o", "wide", check=False).stdout
    logs = release.kubectl(
        "logs",
        f"deployment/{release.component('operator')}",
        "-n",
        release.namespace,
        "--tail=80",
        check=False,
    ).stdout
    return (
        f"status of {name}: {status}\npublished parsers: {published}\nrows: {rows}\n"
        f"pods:\n{pods}\noperator log (last 80 lines):\n{logs}"
    )

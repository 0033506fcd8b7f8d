"""Resource blocking with real Chromium: a job (or its worker pool) that blocks images, fonts,
media and stylesheets makes the site see none of those requests, still extracts the page, and
reports what it skipped apart from the SSRF guard's refusals (docs/worker.md, "Resource
blocking")."""

from __future__ import annotations

import pytest
from scrapeq_worker.settings import WorkerSettings

from .conftest import Connection, job_row, run_burst
from .site import HostileSite
from .test_page_semantics import insert_classic_row

pytestmark = [pytest.mark.postgres, pytest.mark.chromium]

ALL_KINDS = ["image", "font", "media", "stylesheet"]
# The sub-resources of each kind the page asks for, by the kind a job may block.
ASSET_KIND = {"png": "image", "woff2": "font", "wav": "media", "css": "stylesheet"}


def register_page(site: HostileSite, name: str) -> str:
    """A page asking for one sub-resource of each kind (and a script, which is never
    blocked); its content is written by an inline script, so extraction needs JavaScript."""
    site.pages[name] = f"""<!doctype html><html><head><title>{name}</title>
<link rel="stylesheet" href="/asset/{name}-style.css">
<style>@font-face {{ font-family: Shop; src: url(/asset/{name}-face.woff2); }}
h1 {{ font-family: Shop, sans-serif; }}</style>
<script src="/asset/{name}-app.js"></script>
</head><body>
<img src="/asset/{name}-picture.png" alt="">
<audio src="/asset/{name}-sound.wav" preload="auto"></audio>
<div id="app"></div>
<script>document.getElementById('app').innerHTML =
  '<h1 class="name">Laptop</h1><p class="price">9.99</p>';</script>
</body></html>"""
    return site.url(f"/page/{name}")


def requested_kinds(site: HostileSite, name: str) -> set[str]:
    """The blockable kinds of sub-resource the site was asked for by page `name`."""
    return {
        kind
        for path, count in site.hits.items()
        if count and path.startswith(f"/asset/{name}-")
        for extension, kind in ASSET_KIND.items()
        if path.endswith(f".{extension}")
    }


PAYLOAD = {
    "waitUntil": "networkidle0",
    "extract": {"name": "h1.name", "price": ".price"},
}


async def test_a_job_blocking_every_kind_fetches_none_of_them_and_still_extracts(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    url = register_page(site, "blocked")
    job_id = await insert_classic_row(connection, url, {**PAYLOAD, "blockResources": ALL_KINDS})

    await run_burst(worker_settings)

    row = await job_row(connection, job_id)
    assert row.status == "completed", row.last_error
    assert row.result["fields"] == {"name": "Laptop", "price": "9.99"}
    assert row.result["title"] == "blocked (scripted)"  # scripts are never blocked
    assert requested_kinds(site, "blocked") == set()
    assert site.hits["/asset/blocked-app.js"] == 1
    assert row.result["skipped_requests"] == {kind: 1 for kind in ALL_KINDS}
    # Skipped by choice is not refused by the guard: no security event is reported.
    assert "blocked_requests" not in row.result


async def test_a_jobs_own_list_overrides_the_pools_default(
    site: HostileSite, worker_settings: WorkerSettings, connection: Connection
) -> None:
    inherits = register_page(site, "inherits")
    fetches_all = register_page(site, "fetches-all")
    only_images = register_page(site, "only-images")
    inherits_id = await insert_classic_row(connection, inherits, PAYLOAD)
    fetches_all_id = await insert_classic_row(
        connection, fetches_all, {**PAYLOAD, "blockResources": []}
    )
    only_images_id = await insert_classic_row(
        connection, only_images, {**PAYLOAD, "blockResources": ["image"]}
    )

    await run_burst(worker_settings, block_resources=("image", "font", "media", "stylesheet"))

    for job_id in (inherits_id, fetches_all_id, only_images_id):
        row = await job_row(connection, job_id)
        assert row.status == "completed", row.last_error
        assert row.result["fields"] == {"name": "Laptop", "price": "9.99"}
    assert requested_kinds(site, "inherits") == set()
    assert requested_kinds(site, "fetches-all") == set(ALL_KINDS)
    assert requested_kinds(site, "only-images") == {"font", "media", "stylesheet"}
    fetched_everything = await job_row(connection, fetches_all_id)
    assert "skipped_requests" not in fetched_everything.result

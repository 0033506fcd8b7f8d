"""A ScrapeJob naming a parser no worker of its queue has published, on the real parts
(kube-apiserver, PostgreSQL, the operator process): Ready=False with reason UnknownParser and a
Warning Event within 30 s, no rows meanwhile, and its rows queued once a worker publishes the
parser; a queue no worker ever published for queues as before (docs/parsers.md,
"Publication")."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import scrapeq_queue

from tests.e2e.operator.operator_parts import (
    Kubectl,
    OperatorProcess,
    owner_progress,
    run_queue_call,
    scrapejob,
    wait_for_status,
)
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.postgres, pytest.mark.timeout(120)]


def publish(database_url: str, worker_id: str, queue: str, parsers: list[str]) -> None:
    run_queue_call(
        database_url,
        lambda connection: scrapeq_queue.publish_parsers(connection, worker_id, [queue], parsers),
    )


def ready(status: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), None)


def create(kubectl: Kubectl, namespace: str, name: str, **spec: Any) -> str:
    manifest = scrapejob(name, **spec)
    manifest["metadata"]["namespace"] = namespace
    kubectl.create(manifest)
    uid: str = kubectl.get("scrapejob", name, namespace)["metadata"]["uid"]
    return uid


def rows_of(database_url: str, uid: str) -> list[tuple[str, Any]]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        return [
            (row[0], row[1])
            for row in connection.execute(
                "SELECT parser_type, payload FROM scraping_jobs WHERE owner_uid = %s", (uid,)
            )
        ]


def test_a_parser_no_worker_of_the_queue_has_holds_the_job_until_a_worker_publishes_it(
    kubectl: Kubectl,
    namespace: str,
    database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    operator_factory(database_url)
    publish(database_url, "shop-pod-a", "shop", ["shop.listing"])

    uid = create(
        kubectl,
        namespace,
        "products",
        url="https://shop.example.com/p/1",
        queue="shop",
        parser="shop.product",
    )

    status = wait_for_status(
        kubectl,
        namespace,
        "products",
        lambda status: status.get("reason") == "UnknownParser",
        what="the UnknownParser reason",
        timeout=30,
    )
    condition = ready(status)
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "UnknownParser")
    assert "no worker of queue shop has parser 'shop.product'" in condition["message"]
    assert "they have: shop.listing" in condition["message"]
    assert status["phase"] == "Pending"
    events = eventually_blocking(
        lambda: json.loads(
            kubectl.run(
                "get",
                "events",
                "-n",
                namespace,
                "--field-selector",
                "involvedObject.name=products,reason=UnknownParser",
                "-o",
                "json",
            ).stdout
        )["items"],
        within=15,
        what="an UnknownParser Event",
    )
    assert events[0]["type"] == "Warning"
    assert owner_progress(database_url, uid).total == 0

    publish(database_url, "shop-pod-b", "shop", ["shop.product"])

    eventually_blocking(
        lambda: owner_progress(database_url, uid).total == 1,
        within=30,
        what="the rows to be queued once a worker published the parser",
    )
    [(parser_type, payload)] = rows_of(database_url, uid)
    assert parser_type == "shop.product"
    assert payload["parser"] == "shop.product"
    wait_for_status(
        kubectl,
        namespace,
        "products",
        lambda status: status.get("reason") != "UnknownParser",
        what="UnknownParser to clear",
    )


def test_a_queue_no_worker_ever_published_for_is_queued_and_default_needs_no_parser(
    kubectl: Kubectl,
    namespace: str,
    database_url: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    operator_factory(database_url)
    publish(database_url, "shop-pod-a", "shop", [])

    # Pools at zero replicas that never started: nobody can tell, so the rows are queued (a
    # pool starts only once rows wait).
    fresh = create(
        kubectl,
        namespace,
        "fresh",
        url="https://shop.example.com/p/2",
        queue="never-served",
        parser="shop.product",
    )
    declarative = create(
        kubectl, namespace, "declarative", url="https://shop.example.com/p/3", queue="shop"
    )

    for uid in (fresh, declarative):
        eventually_blocking(
            lambda uid=uid: owner_progress(database_url, uid).total == 1,
            within=30,
            what="the rows to be queued",
        )
    assert rows_of(database_url, declarative)[0][0] == "default"
    assert "parser" not in (rows_of(database_url, declarative)[0][1] or {})

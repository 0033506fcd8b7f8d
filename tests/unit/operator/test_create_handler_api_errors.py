"""The create handler when the API server does not answer a read it needs (an upstream job, a
Secret, a ConfigMap): the job is checked again after the not-ready delay, like a job that
cannot run yet, instead of waiting for kopf's default backoff for unexpected errors."""

from __future__ import annotations

import logging
from typing import Any

import kopf
import pytest
from kubernetes.client.rest import ApiException
from scrapeq_operator import handlers
from scrapeq_operator.settings import OperatorSettings

pytestmark = pytest.mark.timeout(30)


class UnansweringCluster:
    """No QueuePolicy resource installed; every ScrapeJob read gets `error`."""

    def __init__(self, error: ApiException) -> None:
        self.error = error
        self.reads: list[str] = []

    async def list_queue_policies(self) -> None:
        return None

    async def read_scrapejob(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append(f"{namespace}/{name}")
        raise self.error


class Runtime:
    def __init__(self, cluster: UnansweringCluster) -> None:
        self.settings = OperatorSettings(database_url="postgresql://db/x")
        self.cluster = cluster


async def create(cluster: UnansweringCluster) -> None:
    spec = {"urls": ["https://shop.example/item/1"], "dependsOn": ["upstream"]}
    await handlers.enqueue_scrapejob(
        spec=spec,
        status={},
        meta={"generation": 1},
        body={"metadata": {"name": "prices", "namespace": "shop", "uid": "u-1"}, "spec": spec},
        uid="u-1",
        namespace="shop",
        name="prices",
        patch=kopf.Patch(),
        memo={"runtime": Runtime(cluster)},
        retry=0,
        logger=logging.getLogger("test"),
    )


@pytest.mark.parametrize("status", [0, 503, 429])
async def test_an_unanswered_read_retries_the_job_after_the_not_ready_delay(status: int) -> None:
    cluster = UnansweringCluster(ApiException(status=status, reason="no answer"))

    with pytest.raises(kopf.TemporaryError, match="the API server did not answer") as raised:
        await create(cluster)

    assert cluster.reads == ["shop/upstream"]
    assert raised.value.delay == OperatorSettings(database_url="x").not_ready_retry_seconds


async def test_a_refused_read_is_not_taken_for_an_outage() -> None:
    cluster = UnansweringCluster(ApiException(status=403, reason="Forbidden"))

    with pytest.raises(ApiException) as raised:
        await create(cluster)

    assert raised.value.status == 403

"""A worker pool may serve several queues (the chart writes them comma-separated)."""

from __future__ import annotations

import pytest
from scrapeq_operator.autoscaler import queues_of
from scrapeq_operator.cluster import WorkerDeployment


def pool(annotations: dict[str, str]) -> WorkerDeployment:
    return WorkerDeployment(
        namespace="shop",
        name="workers",
        uid="uid-1",
        pool="default",
        replicas=1,
        annotations=annotations,
        selector="app=workers",
    )


@pytest.mark.parametrize(
    ("annotation", "queues"),
    [
        (None, ("default",)),
        ("", ("default",)),
        ("shop", ("shop",)),
        ("shop,urgent", ("shop", "urgent")),
        (" shop , urgent ,shop,", ("shop", "urgent")),
    ],
)
def test_a_pool_serves_every_queue_its_annotation_names(
    annotation: str | None, queues: tuple[str, ...]
) -> None:
    annotations = {} if annotation is None else {"scrapeq.io/queue": annotation}
    assert queues_of(pool(annotations)) == queues

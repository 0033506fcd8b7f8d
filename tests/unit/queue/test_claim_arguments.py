"""What a claim refuses before it runs any statement."""

from __future__ import annotations

from typing import Any, cast

import pytest
import scrapeq_queue as queue


async def test_a_claim_naming_a_queue_twice_is_refused_before_it_reaches_the_database() -> None:
    # Repeats are dropped where names are parsed (options.parse_names); one reaching the claim
    # would scan and lock the same rows twice.
    with pytest.raises(ValueError, match="each queue once"):
        await queue.claim_jobs(
            cast(Any, None), worker_id="w", queues=["a", "b", "a"], limit=1, lease_seconds=30
        )

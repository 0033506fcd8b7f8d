"""A stand-alone claimer run as a separate OS process by the concurrency tests.

    python -m tests.integration.queue.claiming_process DSN WORKER_ID MODE

MODE `drain`: print `ready`, wait for a line on stdin (so that all claimers start together),
then claim batches and complete them until the queue is empty; print every claimed
(id, attempt) as one JSON line at the end. MODE `hold`: claim up to 5 jobs with a 1-second lease,
print them as one JSON line, then hang without renewing (the test SIGKILLs it).
"""

from __future__ import annotations

import asyncio
import json
import sys

import scrapeq_queue as queue


async def drain(dsn: str, worker_id: str) -> None:
    connection = await queue.connect(dsn)
    claimed: list[tuple[int, int]] = []
    async with connection:
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        while True:
            jobs = await queue.claim_jobs(
                connection,
                worker_id=worker_id,
                queues=["default"],
                limit=25,
                lease_seconds=60,
                politeness=queue.NO_SITE_LIMIT,
            )
            if not jobs:
                # Empty can also mean "the host is being claimed by another claimer right
                # now" (claims skip a locked host): stop only when nothing is due any more.
                backlog = await queue.queue_backlog(connection, ["default"])
                if backlog["default"].due_pending == 0:
                    break
                continue
            claimed.extend(job.token for job in jobs)
            await queue.complete_many(
                connection,
                [queue.Completion(job.id, job.attempt, {"by": worker_id}, 0.0) for job in jobs],
            )
    print(json.dumps(claimed), flush=True)


async def hold(dsn: str, worker_id: str) -> None:
    connection = await queue.connect(dsn)
    jobs = await queue.claim_jobs(
        connection,
        worker_id=worker_id,
        queues=["default"],
        limit=5,
        lease_seconds=1,
        politeness=queue.NO_SITE_LIMIT,
    )
    print(json.dumps([job.token for job in jobs]), flush=True)
    await asyncio.Event().wait()  # "mid-job": hold the jobs until killed


def main() -> None:
    dsn, worker_id, mode = sys.argv[1:4]
    asyncio.run(drain(dsn, worker_id) if mode == "drain" else hold(dsn, worker_id))


if __name__ == "__main__":
    main()

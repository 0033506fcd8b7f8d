"""Per-namespace caps on rows in flight, which the claim respects (docs/queue.md, "Namespace
caps"): the operator writes them from the cluster's QueuePolicies; the claim reads them.

A namespace's cap is its own row of `scrapeq_namespace_limits`, else the row of `*` (every
namespace), else none. Rows without an owner are never capped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import psycopg

from scrapeq_queue import statements
from scrapeq_queue.errors import translate_database_errors

# The key of the cap of every namespace that has none of its own.
EVERY_NAMESPACE: Final = "*"


@translate_database_errors
async def set_namespace_limits(
    connection: psycopg.AsyncConnection[Any], limits: Mapping[str, int]
) -> None:
    """Make `limits` (namespace or `*` -> most rows in flight, each at least 1) the caps, in one
    statement: caps not named go, changed ones are updated, unchanged ones are not written."""
    bad = {namespace: limit for namespace, limit in limits.items() if limit < 1 or not namespace}
    if bad:
        raise ValueError(f"a namespace cap is a namespace and a number from 1: {bad}")
    names = sorted(limits)
    await connection.execute(
        statements.NAMESPACE_LIMITS_REPLACE,
        {"namespaces": names, "limits": [limits[name] for name in names]},
    )


@translate_database_errors
async def namespace_limits(connection: psycopg.AsyncConnection[Any]) -> dict[str, int]:
    """The caps as the claim reads them."""
    cursor = await connection.execute(statements.NAMESPACE_LIMITS_READ)
    return {str(row[0]): int(row[1]) for row in await cursor.fetchall()}

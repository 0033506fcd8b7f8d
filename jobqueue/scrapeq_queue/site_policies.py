"""Site policies the cluster admin owns: per site pattern a limit, a delay, the robots.txt rule,
the user agent and contact, and which namespaces may crawl the sites (docs/queue.md, "Site
policies"; docs/architecture.md, record 16).

The operator writes each SitePolicy resource here (`apply_site_policy`, `delete_site_policy`);
each call resolves every known site's policy again into its `scrapeq_hosts` row, so the claim
reads a site's limit and delay and never matches a pattern. A site seen for the first time
takes its policy when its row is made.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import psycopg

from scrapeq_queue import statements
from scrapeq_queue.errors import translate_database_errors
from scrapeq_queue.politeness import site_delay_problem, site_limit_problem

# A pattern is `*` (every site), a site (`example.com`: a registrable domain, or a host name
# where there is none), or `*.` and a name (`*.example.com`: that name and every name under
# it). Lower case, as site keys are.
_PATTERN: Final = re.compile(r"^(\*|(\*\.)?[a-z0-9_-]+(\.[a-z0-9_-]+)*)$")
# Bounds a user meets in the CRD's schema as well: a Kubernetes name, and a header's worth of
# user agent or contact.
MAX_POLICY_NAME_CHARS: Final = 253
MAX_USER_AGENT_CHARS: Final = 512
MAX_PATTERNS_PER_POLICY: Final = 100
# The reason a row of a site whose policy refuses the row's namespace fails with (for good).
SITE_NOT_ALLOWED_REASON: Final = "site_not_allowed"


@dataclass(frozen=True)
class SitePolicy:
    """One SitePolicy: its settings for every site its patterns match. None leaves a setting to
    other policies of the same pattern, else to the worker pool's defaults."""

    name: str
    patterns: tuple[str, ...]
    max_concurrent_per_site: int | None = None
    delay_seconds: float | None = None
    respect_robots_txt: bool | None = None
    user_agent: str | None = None
    contact: str | None = None
    # None: every namespace not denied may crawl; else only these.
    allowed_namespaces: tuple[str, ...] | None = None
    denied_namespaces: tuple[str, ...] = ()
    # The sites' limit follows their latency and server errors, up to max_concurrent_per_site
    # (docs/queue.md, "Adaptive concurrency").
    adaptive_concurrency: bool = False

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > MAX_POLICY_NAME_CHARS:
            raise ValueError(
                f"a site policy's name must have 1 to {MAX_POLICY_NAME_CHARS} characters"
            )
        if not self.patterns or len(self.patterns) > MAX_PATTERNS_PER_POLICY:
            raise ValueError(
                f"site policy {self.name}: sites must name 1 to {MAX_PATTERNS_PER_POLICY} patterns"
            )
        for pattern in self.patterns:
            if not _PATTERN.match(pattern):
                raise ValueError(
                    f"site policy {self.name}: {pattern!r} is not a site pattern (example.com, "
                    "*.example.com, or *; lower case)"
                )
        if self.max_concurrent_per_site is not None and (
            problem := site_limit_problem(self.max_concurrent_per_site)
        ):
            raise ValueError(f"site policy {self.name}: maxConcurrentPerSite {problem}")
        if self.delay_seconds is not None and (problem := site_delay_problem(self.delay_seconds)):
            raise ValueError(f"site policy {self.name}: delaySeconds {problem}")
        if self.adaptive_concurrency and self.max_concurrent_per_site is None:
            raise ValueError(
                f"site policy {self.name}: adaptiveConcurrency needs maxConcurrentPerSite, the "
                "limit the sites' concurrency may grow to"
            )
        for field, text in (("userAgent", self.user_agent), ("contact", self.contact)):
            if text is not None and not 0 < len(text) <= MAX_USER_AGENT_CHARS:
                raise ValueError(
                    f"site policy {self.name}: {field} must have 1 to {MAX_USER_AGENT_CHARS} "
                    "characters"
                )


@dataclass(frozen=True)
class NamespaceRule:
    """Which namespaces one policy lets crawl its sites."""

    policy: str
    allowed: frozenset[str] | None  # None: every namespace not denied
    denied: frozenset[str]

    def refuses(self, namespace: str) -> bool:
        return namespace in self.denied or (
            self.allowed is not None and namespace not in self.allowed
        )


@dataclass(frozen=True)
class SiteRule:
    """What the site policies say about one site: the most specific pattern that matches it,
    and the strictest of each setting of the policies naming that pattern."""

    host_key: str
    pattern: str | None  # None: no policy applies
    policies: tuple[str, ...]
    max_concurrent_per_site: int | None
    delay_seconds: float | None
    respect_robots_txt: bool | None
    user_agent: str | None
    contact: str | None
    # The policies of the pattern that name namespaces, by name.
    namespace_rules: tuple[NamespaceRule, ...] = ()

    def refusing_policy(self, namespace: str | None) -> str | None:
        """The first policy (by name) that refuses `namespace` this site; None when none does.
        Rows without an owner (namespace None) are never refused."""
        if namespace is None:
            return None
        return next((rule.policy for rule in self.namespace_rules if rule.refuses(namespace)), None)


@translate_database_errors
async def apply_site_policy(connection: psycopg.AsyncConnection[Any], policy: SitePolicy) -> int:
    """Make `policy` the cluster's (replacing what it said before) and resolve every known
    site's policy again, in one transaction; answers how many sites changed their limit, delay
    or pattern."""
    async with connection.transaction():
        await connection.execute(statements.SITE_POLICY_DELETE, {"policy": policy.name})
        await connection.execute(
            statements.SITE_POLICY_INSERT,
            {
                "policy": policy.name,
                "patterns": list(policy.patterns),
                "max_in_flight": policy.max_concurrent_per_site,
                "delay_seconds": policy.delay_seconds,
                "respect_robots_txt": policy.respect_robots_txt,
                "user_agent": policy.user_agent,
                "contact": policy.contact,
                "allowed_namespaces": (
                    None if policy.allowed_namespaces is None else list(policy.allowed_namespaces)
                ),
                "denied_namespaces": list(policy.denied_namespaces),
                "adaptive": policy.adaptive_concurrency,
            },
        )
        return await _resolve(connection)


@translate_database_errors
async def delete_site_policy(connection: psycopg.AsyncConnection[Any], name: str) -> int:
    """Remove the policy `name` and resolve every known site's policy again; answers how many
    sites changed."""
    async with connection.transaction():
        await connection.execute(statements.SITE_POLICY_DELETE, {"policy": name})
        return await _resolve(connection)


@translate_database_errors
async def retain_site_policies(
    connection: psycopg.AsyncConnection[Any], names: Iterable[str], *, listed_at: datetime
) -> list[str]:
    """Keep only the policies named in `names` (the cluster's SitePolicies, listed from
    `listed_at` on, by the database's clock) or written since then: a policy deleted while no
    operator watched goes too. Resolves every known site again when one went; answers the
    names removed."""
    async with connection.transaction():
        cursor = await connection.execute(
            statements.SITE_POLICIES_RETAIN, {"names": list(names), "listed_at": listed_at}
        )
        removed = sorted({str(row[0]) for row in await cursor.fetchall()})
        if removed:
            await _resolve(connection)
    return removed


async def _resolve(connection: psycopg.AsyncConnection[Any]) -> int:
    cursor = await connection.execute(statements.SITE_POLICIES_RESOLVE)
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


@translate_database_errors
async def site_rules(
    connection: psycopg.AsyncConnection[Any], host_keys: Sequence[str]
) -> dict[str, SiteRule]:
    """What the site policies say about each of `host_keys` (whether the sites are known or
    not), keyed by site."""
    cursor = await connection.execute(
        statements.SITE_RULES, {"host_keys": list(dict.fromkeys(host_keys))}
    )
    rules: dict[str, SiteRule] = {}
    for row in await cursor.fetchall():
        host_key, pattern, policies, limit, delay, robots, user_agent, contact, named = row
        rules[host_key] = SiteRule(
            host_key=host_key,
            pattern=pattern,
            policies=tuple(policies or ()),
            max_concurrent_per_site=limit,
            delay_seconds=delay,
            respect_robots_txt=robots,
            user_agent=user_agent,
            contact=contact,
            namespace_rules=tuple(
                NamespaceRule(
                    policy=entry["policy"],
                    allowed=None if entry["allow"] is None else frozenset(entry["allow"]),
                    denied=frozenset(entry["deny"] or ()),
                )
                for entry in named or ()
            ),
        )
    return rules


@translate_database_errors
async def refusing_policies(
    connection: psycopg.AsyncConnection[Any], host_keys: Sequence[str], namespace: str
) -> dict[str, str]:
    """The sites of `host_keys` whose site policy refuses `namespace`, each with the name of
    the policy that refuses it."""
    cursor = await connection.execute(
        statements.SITE_REFUSALS,
        {"host_keys": list(dict.fromkeys(host_keys)), "namespace": namespace},
    )
    return {str(host_key): str(policy) for host_key, policy in await cursor.fetchall()}

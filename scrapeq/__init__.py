"""scrapeq: browser scraping as queued batch work on Kubernetes and PostgreSQL.

This package holds the `scrapeq` command and the local real parts used by the tests and the
demo. The components live in their own packages: `scrapeq_queue` (the queue contract),
`scrapeq_worker` and `scrapeq_operator`.
"""

__version__ = "0.1.0"

"""scrapeq: browser scraping as queued batch work on Kubernetes and PostgreSQL.

This package holds the `scrapeq` command and the local real parts used by the tests and the
demo. The components live in their own packages: `scrapeq_queue` (the queue contract),
`scrapeq_worker` and `scrapeq_operator`.
"""

import importlib.metadata

# pyproject.toml holds the version; the installed distribution's metadata carries it here.
__version__ = importlib.metadata.version("scrapeq")

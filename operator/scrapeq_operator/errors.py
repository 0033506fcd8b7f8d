"""The operator's errors: what went wrong, and whether trying again later can help.

A database that cannot be reached is `scrapeq_queue.DatabaseUnavailable`, the one type every
component catches for it (the queue package owns every connection).
"""

from __future__ import annotations


class OperatorError(Exception):
    """Base of every error the scrapeq operator raises on purpose."""


class ConfigurationError(OperatorError):
    """The operator was started with settings that cannot work; fix them and restart."""


class SchemaNotCurrentError(OperatorError):
    """The queue schema is behind this operator and migrations were not allowed to run."""


class JobNotRunnableError(OperatorError):
    """A ScrapeJob cannot be turned into rows as it stands (bad input a user must fix).

    `reason` is the CamelCase reason for the Ready=False condition and the Event. `permanent`
    means nothing can change the outcome (the spec is immutable): the job ends Failed instead
    of being checked again later.
    """

    def __init__(self, reason: str, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.permanent = permanent


class JobBlockedError(JobNotRunnableError):
    """A ScrapeJob waits for its dependencies (spec.dependsOn, urlsFrom.scrapeJob) to succeed."""

    def __init__(self, message: str) -> None:
        super().__init__("WaitingForDependencies", message)

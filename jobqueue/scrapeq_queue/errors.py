"""What can go wrong when talking to the queue, as a small hierarchy callers can act on.

`DatabaseUnavailable` is temporary (reconnect and try again later); `SchemaOutOfDate` needs an
operator (`scrapeq migrate`); `InvalidJob` is bad input that no retry will fix.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, ParamSpec, TypeVar

import psycopg
from psycopg import errors as pg_errors


class QueueError(Exception):
    """Base class of every error the queue package raises."""


class DatabaseUnavailable(QueueError):
    """The database could not be reached or the connection broke; retry with a new connection."""


class SchemaOutOfDate(QueueError):
    """The database schema is missing or older than this code; run `scrapeq migrate`."""


class InvalidJob(QueueError):
    """A job description is unusable (an empty URL, a payload that is not a JSON object...)."""


_P = ParamSpec("_P")
_R = TypeVar("_R")

# Errors that mean "the tables, types or functions this code expects are not there": a database
# that is not migrated, or migrated by an older release.
_SCHEMA_ERRORS = (
    pg_errors.UndefinedTable,
    pg_errors.UndefinedColumn,
    pg_errors.UndefinedObject,
    pg_errors.UndefinedFunction,
)


def translate_database_errors(
    function: Callable[_P, Awaitable[_R]],
) -> Callable[_P, Coroutine[Any, Any, _R]]:
    """Wrap an async queue operation so psycopg errors surface as the queue's own errors."""

    @functools.wraps(function)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with database_errors_translated():
            return await function(*args, **kwargs)

    return wrapper


@contextlib.contextmanager
def database_errors_translated() -> Iterator[None]:
    """The same translation as `translate_database_errors`, for code that cannot be wrapped
    (async generators such as the export stream)."""
    try:
        yield
    except _SCHEMA_ERRORS as error:
        raise SchemaOutOfDate(
            f"the scrapeq schema is missing or out of date ({error}); run `scrapeq migrate`"
        ) from error
    except (psycopg.OperationalError, psycopg.InterfaceError) as error:
        raise DatabaseUnavailable(f"database unavailable: {error}") from error

"""Whether this worker can do its work, and why not: the state behind /readyz and the
`scrapeq_worker_ready` gauge.

A worker that cannot work must not claim. Its claims would only fail: every job
`internal_error` without a writable temporary directory, every rendered job without a browser,
every statement against a schema that is behind. Each failure costs the row one of its retries,
so a single misconfigured pod burns through a queue that healthy pods would have completed.
The worker therefore checks before its first claim, and again whenever a job shows that one of
these broke; while a problem holds it claims nothing (rows it holds but has not started go back
to pending at once), /readyz answers 503 naming the problems, the gauges say which, the log
says why, and it checks again every RECHECK_SECONDS until the cause goes away.

It stays up rather than exiting: the usual causes are fixed from outside without touching the
pod (`scrapeq migrate` after a rollout, a full volume emptied), and a pod that exits waits in
CrashLoopBackOff for up to five minutes between restarts, while an unready pod resumes within
RECHECK_SECONDS. A burst run (`--burst`) has no one to wait for: it exits with status 1.

`ReadinessSchedule` is the one place that writes this state: the checks and their schedule,
the problems jobs reveal, the database's answers (from the queue gateway) and the drain.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Final, Literal, Protocol, get_args

from prometheus_client import Gauge

from .errors import BrowserUnavailable

logger = logging.getLogger(__name__)

# What can keep a worker from being ready. The first three stop it from claiming; `database`
# (claims are what probes it) and `stopping` (the drain) only make /readyz answer 503.
Problem = Literal["temp_dir", "browser", "schema", "database", "stopping"]
PROBLEMS: Final[tuple[Problem, ...]] = get_args(Problem)
BLOCKING: Final[frozenset[Problem]] = frozenset({"temp_dir", "browser", "schema"})

# How often a worker that cannot work looks again. A check is a file write, a `--version` run
# of Chromium (or, after a launch failed, a launch) and one query.
RECHECK_SECONDS: Final = 5.0
# `chromium --version` answers in about 0.2 s.
_VERSION_TIMEOUT_SECONDS: Final = 15.0
_OUTPUT_TAIL_CHARS: Final = 500


class Readiness:
    """The current problems of one worker, mirrored into its gauges and its log."""

    def __init__(self, ready: Gauge, not_ready: Gauge, *, initially: Problem, why: str) -> None:
        """Start not ready for one reason (say, not connected yet), without logging it."""
        self._ready = ready
        self._not_ready = not_ready
        self._problems: dict[Problem, str] = {initially: why}
        for problem in PROBLEMS:
            self._not_ready.labels(problem).set(1 if problem == initially else 0)
        self._ready.set(0)

    def report(self, problem: Problem, message: str | None) -> None:
        """Record one check's verdict: `message` says what is wrong, None that all is well.

        A new or changed problem that stops claims is logged as an error (the others, a lost
        database and the drain, are logged where they happen), a recovery as info."""
        previous = self._problems.get(problem)
        if message is None:
            if previous is None:
                return
            del self._problems[problem]
            if problem in BLOCKING:
                logger.info("%s: recovered (was: %s)", problem, previous)
        else:
            if previous == message:
                return
            self._problems[problem] = message
            if problem in BLOCKING:
                logger.error("not ready, claiming nothing (%s): %s", problem, message)
        self._not_ready.labels(problem).set(0 if message is None else 1)
        self._ready.set(0 if self._problems else 1)

    def holds(self, problem: Problem) -> bool:
        return problem in self._problems

    @property
    def ready(self) -> bool:
        """No problem at all: what /readyz answers."""
        return not self._problems

    @property
    def can_claim(self) -> bool:
        """No problem that makes claimed work fail."""
        return not BLOCKING.intersection(self._problems)

    def describe(self) -> str:
        """Every current problem, one `reason: message` after the other."""
        return "; ".join(f"{problem}: {message}" for problem, message in self._problems.items())


class LocalChecks(Protocol):
    """The checks of this machine: each returns None when all is well, else what is wrong."""

    async def temp_dir(self) -> str | None: ...

    async def browser(self, *, relaunch: bool) -> str | None:
        """`relaunch`: a launch failed, and only launching again tells whether it works."""
        ...


class LaunchableBrowser(Protocol):
    """What the browser check needs of the browser pool."""

    @property
    def executable(self) -> str | None: ...

    async def start(self) -> None: ...


class MachineChecks:
    """The real local checks: the temporary directory and the browser pool's Chromium."""

    def __init__(self, configured_chromium: str | None, browser: LaunchableBrowser) -> None:
        self._configured = configured_chromium
        self._browser = browser

    async def temp_dir(self) -> str | None:
        return await asyncio.to_thread(temp_dir_problem)

    async def browser(self, *, relaunch: bool) -> str | None:
        problem = await browser_problem(self._configured, self._browser.executable)
        if problem is None and relaunch:
            try:
                await self._browser.start()
            except BrowserUnavailable as error:
                return error.message
        return problem


class ReadinessSchedule:
    """The one owner of the worker's readiness: the problems behind /readyz and the gauges,
    whether the worker may claim, and when it checks again.

    The checks run before the first claim. After that they run only when something shows a
    problem (a job that cannot work, a schema behind, see `cannot_work`), then every
    `recheck_seconds` until every check passes. Database outages are reported by the queue
    gateway; they make the worker unready without stopping claims (claims are what probes the
    database).
    """

    def __init__(
        self,
        readiness: Readiness,
        checks: LocalChecks,
        *,
        recheck_seconds: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.readiness = readiness
        self.recheck_seconds = recheck_seconds
        self._checks = checks
        self._clock = clock
        # How many rounds of checks have run.
        self.rounds = 0
        # When the checks run next (None: not until something shows a problem).
        self._recheck_at: float | None = 0.0
        # The local checks (temporary directory, browser) are due at start and while one fails.
        self._local_checks_due = True
        self._schema_verified = False
        # A launch failed: only launching again tells whether the browser is back.
        self._launch_failed = False

    @property
    def due(self) -> bool:
        """A round of checks is due now."""
        return self._recheck_at is not None and self._clock() >= self._recheck_at

    @property
    def can_claim(self) -> bool:
        """Every check that guards claims passed (and the schema was verified)."""
        return self.readiness.can_claim and self._schema_verified

    @property
    def cannot_work(self) -> bool:
        """A local problem or a schema behind holds (not merely an unverified schema)."""
        return not self.readiness.can_claim

    def seconds_to_next_round(self) -> float:
        """How long until the next round (scheduling one `recheck_seconds` away if none is)."""
        if self._recheck_at is None:
            self._recheck_at = self._clock() + self.recheck_seconds
        return max(0.0, self._recheck_at - self._clock())

    async def check(self, schema_is_current: Callable[[], Awaitable[bool | None]]) -> None:
        """Run every due check and schedule the next round while one fails.
        `schema_is_current()` answers True, or None when the database did not answer (a schema
        behind is reported through `problem`)."""
        self.rounds += 1
        if self._local_checks_due:
            self.readiness.report("temp_dir", await self._checks.temp_dir())
            problem = await self._checks.browser(relaunch=self._launch_failed)
            self.readiness.report("browser", problem)
            if problem is None:
                self._launch_failed = False
            self._local_checks_due = self.readiness.holds("temp_dir") or self.readiness.holds(
                "browser"
            )
        if not self._schema_verified and await schema_is_current():
            self._schema_verified = True
            self.readiness.report("schema", None)
        if self.can_claim:
            self._recheck_at = None
        elif self.readiness.can_claim:
            # Only the database did not answer; that attempt already waited its short backoff.
            self._recheck_at = self._clock()
        else:
            self._recheck_at = self._clock() + self.recheck_seconds

    def problem(self, problem: Problem, message: str) -> None:
        """Something showed that this worker cannot work: stop claiming until a check passes."""
        self.readiness.report(problem, message)
        if problem == "browser":
            self._launch_failed = True
        if problem == "schema":
            self._schema_verified = False
        else:
            self._local_checks_due = True
        if self._recheck_at is None:
            self._recheck_at = self._clock() + self.recheck_seconds

    def database_failed(self, message: str) -> None:
        self.readiness.report("database", f"unavailable: {message}")

    def database_answered(self) -> None:
        self.readiness.report("database", None)

    def stopping(self) -> None:
        self.readiness.report("stopping", "draining")

    @property
    def ready(self) -> bool:
        return self.readiness.ready

    def describe(self) -> str:
        return self.readiness.describe()


def temp_dir_problem() -> str | None:
    """None when a private directory can be made and written in the temporary directory
    (TMPDIR, which Chromium also uses, else Python's choice); else what is wrong."""
    directory = os.environ.get("TMPDIR")
    try:
        # gettempdir raises FileNotFoundError when no candidate directory is writable.
        directory = directory or tempfile.gettempdir()
        probe = tempfile.mkdtemp(prefix="scrapeq-probe-", dir=directory)
        try:
            with open(os.path.join(probe, "probe"), "wb") as file:
                file.write(b"\0" * 4096)
        finally:
            shutil.rmtree(probe, ignore_errors=True)
    except OSError as error:
        # The directory and the error's words, not the probe's random name: the message must
        # stay the same from one check to the next (it is logged when it changes).
        where = directory or "any of the usual places"
        return (
            f"no writable temporary directory ({where}: {error.strerror or error}); "
            "Chromium's profile and the worker's files need one: mount a writable volume "
            "(an emptyDir) on /tmp or point TMPDIR at one"
        )
    return None


def _is_executable_file(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


async def browser_problem(configured: str | None, executable: str | None) -> str | None:
    """None when Chromium can run: `configured` (the --chromium setting) exists if given and
    `executable` (the one the pool will start) answers `--version`; else what is wrong."""
    if configured and not _is_executable_file(configured):
        return f"--chromium {configured} is not an executable file"
    if executable is None:
        return (
            "no Chromium executable found: install chromium-headless-shell (or chromium) or "
            "set --chromium"
        )
    try:
        process = await asyncio.create_subprocess_exec(
            executable,
            "--version",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as error:
        return f"Chromium ({executable}) cannot be run: {error}"
    try:
        async with asyncio.timeout(_VERSION_TIMEOUT_SECONDS):
            output, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        return f"Chromium ({executable}) did not answer --version in {_VERSION_TIMEOUT_SECONDS:g}s"
    if process.returncode != 0:
        tail = output.decode(errors="replace").strip()[-_OUTPUT_TAIL_CHARS:]
        return (
            f"Chromium ({executable}) cannot start: --version exited with status "
            f"{process.returncode}: {tail or 'no output'}"
        )
    return None

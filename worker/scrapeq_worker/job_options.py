"""A job's payload read into typed options, with the worker's defaults filled in.

The queue package owns the list of payload options and their validation
(`scrapeq_queue.payload.validate_payload`); this module only turns a valid payload into the
values the engines need, so the two can never disagree about what is allowed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast

from scrapeq_queue.page_steps import (
    DEFAULT_IDLE_SECONDS,
    DEFAULT_LOAD_MORE_CLICKS,
    DEFAULT_SCROLL_ROUNDS,
    DEFAULT_SETTLE_SECONDS,
    DEFAULT_STEP_TIMEOUT_SECONDS,
)
from scrapeq_queue.payload import (
    DEFAULT_FOLLOW_MAX_PAGES,
    DEFAULT_NEXT_MAX_PAGES,
    BlockMarker,
    URLPattern,
    block_markers_of,
    compile_url_pattern,
    structured_data_syntaxes,
    validate_payload,
)
from scrapeq_queue.sealed_credentials import Credentials, SealingError, SealingKeys

from .egress_proxy import UpstreamProxy
from .errors import BadInput, RetryLater, WorkerError
from .extraction import FieldSpec, ItemsSpec, parse_fields, parse_items

# The names of the fields that read a page's block markers: a NUL no payload's field name can
# hold (they are read with the job's fields, in both engines, and never stored).
BLOCK_MARKER_FIELD: Final = "\x00block marker "

WaitUntil = Literal["load", "domcontentloaded", "networkidle0", "networkidle2"]

# The wait of a row whose payload says nothing about waiting (neither waitUntil nor waitFor):
# what the classic worker did (puppeteer's networkidle0: no request for 500 ms), so a page whose
# scripts fill the content after `load` is read once they are done; bounded, like every wait,
# by the job's timeoutSeconds. ScrapeJobs always say: their CRD defaults waitUntil to `load`.
CLASSIC_WAIT_UNTIL: Final[WaitUntil] = "networkidle0"
# With a waitFor selector the row has said what to wait for: navigation ends at `load`.
WAIT_UNTIL_WITH_WAIT_FOR: Final[WaitUntil] = "load"


@dataclass(frozen=True)
class FollowOptions:
    """Links to enqueue as child jobs: those matching `selector`, down to `max_depth`.

    `max_pages` caps the followed pages of the whole job (the queue enforces it);
    `same_host`, `include` and `exclude` choose which links qualify (see following.py);
    `extract`, when given, replaces the payload's `extract` for the followed pages.
    """

    selector: str
    max_depth: int
    max_pages: int
    same_host: bool = True
    # RE2 patterns: matching is linear in the link's length whatever the pattern, so a
    # user's pattern cannot stall the event loop (see scrapeq_queue.payload).
    include: tuple[URLPattern, ...] = ()
    exclude: tuple[URLPattern, ...] = ()
    extract: Mapping[str, Any] | None = None
    # The route the followed pages are scraped with (see routes.py); None: this page's options.
    label: str | None = None


@dataclass(frozen=True)
class NextOptions:
    """Pagination: the first link matching `selector` is the next page, scraped with the same
    options, at chain position `page` + 1, up to `max_pages` pages in the chain."""

    selector: str
    max_pages: int
    # The chain position of this row's page (1: the page the chain starts on).
    page: int = 1
    # The next page is what clicking the first visible match shows in the same tab (a button
    # run by a script), read within this row, not a link queued as a row of its own.
    click: bool = False
    # With click: how long a click may take to change the page before it counts as the last.
    settle_seconds: float = DEFAULT_SETTLE_SECONDS


@dataclass(frozen=True)
class PageStep:
    """One step of `steps` (scrapeq_queue.page_steps): what a visitor does on the rendered
    page before it is read. Only the fields of its `action` mean anything."""

    action: str
    timeout_seconds: float = DEFAULT_STEP_TIMEOUT_SECONDS
    selector: str | None = None
    # type, fill, select: the value (a literal, or for type and fill a sealed value).
    value: str | None = field(default=None, repr=False)
    # The value came from the row's sealed credentials: it is typed only into pages of these
    # origins and never shown (messages, logs, results).
    sealed_origins: tuple[str, ...] | None = None
    # press: the key.
    key: str | None = None
    # click: what to wait for after the click.
    wait_for_navigation: bool = False
    wait_for: str | None = None
    # scroll: stop once `count` elements match `selector`; scroll and loadMore: their caps and
    # how long a round waits for the page to grow.
    count: int | None = None
    max_rounds: int = DEFAULT_SCROLL_ROUNDS
    settle_seconds: float = DEFAULT_SETTLE_SECONDS
    # waitFor: "visible" or "hidden".
    state: str = "visible"
    # waitForResponse: searched in each response's URL (RE2, like follow.include).
    url_pattern: URLPattern | None = None
    # waitForNetworkIdle: how long no request may be in flight.
    idle_seconds: float = DEFAULT_IDLE_SECONDS


@dataclass(frozen=True)
class LoginOptions:
    """payload.session.login: the page and steps that log a browser context in, once, before
    the first page of the job's owner that context renders; `success_selector`, when given,
    must be visible afterwards or the login failed."""

    url: str
    steps: tuple[PageStep, ...]
    success_selector: str | None = None
    # What tells two logins apart (a context logged in with one is not with the other): the
    # login as the payload gives it, which names sealed values but holds none.
    identity: str = ""


@dataclass(frozen=True)
class JobOptions:
    """Everything one scrape needs besides the URL."""

    render: bool = True
    wait_until: WaitUntil = "load"
    wait_for: str | None = None
    timeout_seconds: float = 30.0
    headers: Mapping[str, str] | None = None
    fields: tuple[FieldSpec, ...] = ()
    follow: FollowOptions | None = None
    # payload.next: the page's "next page" link, followed as a chain of its own.
    next: NextOptions | None = None
    # payload.route: the label of routes this page was followed under (None: none).
    route: str | None = None
    # payload.sealed opened: headers and cookies for the origins they were given for.
    credentials: Credentials | None = None
    # Sub-resource kinds the browser does not fetch (payload.blockResources, else the pool's).
    block_resources: frozenset[str] = frozenset()
    # The job's own upstream proxies (spec.proxy, sealed with the credentials), each page
    # through one of them in turn; empty: the worker pool's upstream proxy, if any.
    upstream_proxies: tuple[UpstreamProxy, ...] = ()
    # The cookie jar of the page's session (session_pool.py): the engine starts the page with
    # exactly these cookies and reports its jar afterwards (PageOutcome.cookies). None: no
    # session, the engine's own cookies as before.
    session_cookies: tuple[dict[str, Any], ...] | None = None
    # payload.parser: the registered parser the row names (None: see parsers.py's selection).
    parser: str | None = None
    # Characters of the page's HTML the engine keeps for a parser (0: none, no parser runs).
    html_limit: int = 0
    # payload.items: one object per element matching its selector.
    items: ItemsSpec | None = None
    # payload.structuredData: the syntaxes of the page's structured data to read.
    structured_data: tuple[str, ...] = ()
    # payload.keep: the page artifacts to keep (html, text, screenshot, pdf; artifacts.py).
    keep: frozenset[str] = frozenset()
    # Characters of the body's text the engine reads for the text artifact (0: none).
    text_chars: int = 0
    # Characters the field values may take together (0: the worker's --max-result-bytes); more
    # when an object store takes results over the row's limit (artifacts.py).
    result_chars: int = 0

    # Block markers: the pool's, then the job's (payload.blockMarkers).
    block_markers: tuple[BlockMarker, ...] = ()

    @property
    def text_sample(self) -> bool:
        """The result carries the page's text sample: the job asked for no fields or items."""
        return not self.fields and self.items is None

    @property
    def read_fields(self) -> tuple[FieldSpec, ...]:
        """What the engines read from the page: the job's fields, then one field per block
        marker (every match's text, named BLOCK_MARKER_FIELD and its position)."""
        return self.fields + tuple(
            FieldSpec(f"{BLOCK_MARKER_FIELD}{position}", marker.selector, all=True)
            for position, marker in enumerate(self.block_markers)
        )

    # payload.steps, run in order on the rendered page before it is read.
    steps: tuple[PageStep, ...] = ()
    # payload.session.login: how the page's browser context logs in first.
    login: LoginOptions | None = None

    # payload.crawlKey: the crawl whose memory the page reads and writes (recrawl.py), and
    # payload.recrawlAfterSeconds: a fetch by that crawl this recent skips the page.
    crawl_key: str | None = None
    recrawl_after_seconds: float | None = None


def options_from_payload(
    payload: object,
    *,
    default_timeout_seconds: float,
    sealing_keys: SealingKeys | None = None,
    default_block_resources: Sequence[str] = (),
    default_block_markers: Sequence[BlockMarker] = (),
    loaded: bool = False,
    checked: bool = False,
) -> JobOptions:
    """Validate `payload` with the queue's rules and return the options; raise BadInput with
    every problem listed when it is not valid, RetryLater (credentials_unreadable) when its
    sealed credentials cannot be opened with `sealing_keys`. Whatever the payload holds,
    nothing but these worker errors is raised.

    A payload's blockResources replaces `default_block_resources` (the pool's) whole: `[]`
    fetches everything whatever the pool blocks. A payload's blockMarkers add to
    `default_block_markers` (the pool's). `loaded=True` says the payload is a claimed row's,
    which the queue's load_payload read within its bounds of size, nesting and numbers: only
    the options are checked again (validate_payload's `loaded`); `checked=True` that the claim
    checked the options too (ClaimedJob.options_checked): nothing is checked again, and a value
    the options cannot be read from is still a BadInput, never another error."""
    problems = [] if checked else validate_payload(payload, loaded=loaded)
    if problems:
        raise BadInput("invalid payload: " + "; ".join(problems), reason="invalid_payload")
    try:
        return _read_options(
            payload if isinstance(payload, Mapping) else {},
            default_timeout_seconds=default_timeout_seconds,
            sealing_keys=sealing_keys,
            default_block_resources=default_block_resources,
            default_block_markers=default_block_markers,
        )
    except WorkerError:
        raise
    except Exception as error:
        # Validation passed, so this is a value no rule foresaw: the row's fault, not the loop's.
        raise BadInput(
            f"invalid payload: it could not be read ({type(error).__name__})",
            reason="invalid_payload",
        ) from error


def _read_options(
    options: Mapping[str, Any],
    *,
    default_timeout_seconds: float,
    sealing_keys: SealingKeys | None,
    default_block_resources: Sequence[str],
    default_block_markers: Sequence[BlockMarker] = (),
) -> JobOptions:
    follow: FollowOptions | None = None
    if "follow" in options:
        raw = options["follow"]
        follow = FollowOptions(
            selector=str(raw["selector"]).strip(),
            # Following one level is what "list page -> detail pages" needs; deeper is opt-in.
            max_depth=int(raw.get("maxDepth", 1)),
            max_pages=int(raw.get("maxPages", DEFAULT_FOLLOW_MAX_PAGES)),
            same_host=bool(raw.get("sameHost", True)),
            include=tuple(compile_url_pattern(pattern) for pattern in raw.get("include", ())),
            exclude=tuple(compile_url_pattern(pattern) for pattern in raw.get("exclude", ())),
            extract=dict(raw["extract"]) if "extract" in raw else None,
            label=str(raw["label"]) if "label" in raw else None,
        )
    pagination: NextOptions | None = None
    if "next" in options:
        raw = options["next"]
        pagination = NextOptions(
            selector=str(raw["selector"]).strip(),
            max_pages=int(raw.get("maxPages", DEFAULT_NEXT_MAX_PAGES)),
            page=int(raw.get("page", 1)),
            click=raw.get("click") is True,
            settle_seconds=float(raw.get("settleSeconds", DEFAULT_SETTLE_SECONDS)),
        )
    headers = options.get("headers")
    credentials = _open_credentials(options.get("sealed"), sealing_keys)
    return JobOptions(
        render=bool(options.get("render", True)),
        wait_until=cast(WaitUntil, options.get("waitUntil", _default_wait_until(options))),
        wait_for=str(options["waitFor"]).strip() if "waitFor" in options else None,
        timeout_seconds=float(options.get("timeoutSeconds", default_timeout_seconds)),
        headers=dict(headers) if headers else None,
        fields=parse_fields(options.get("extract")),
        follow=follow,
        next=pagination,
        route=str(options["route"]) if "route" in options else None,
        credentials=credentials,
        block_resources=frozenset(options.get("blockResources", default_block_resources)),
        block_markers=(
            *default_block_markers,
            *block_markers_of(options.get("blockMarkers", ())),
        ),
        upstream_proxies=_upstream_proxies(credentials),
        parser=str(options["parser"]) if "parser" in options else None,
        items=parse_items(options.get("items")),
        structured_data=structured_data_syntaxes(options.get("structuredData")),
        steps=_page_steps(options.get("steps", ()), credentials),
        login=_login(options.get("session"), credentials),
        keep=frozenset(options.get("keep", ())),
        crawl_key=str(options["crawlKey"]) if "crawlKey" in options else None,
        recrawl_after_seconds=(
            float(options["recrawlAfterSeconds"]) if "recrawlAfterSeconds" in options else None
        ),
    )


def _login(
    session: Mapping[str, Any] | None, credentials: Credentials | None
) -> LoginOptions | None:
    if not session:
        return None
    login = session["login"]
    return LoginOptions(
        url=str(login["url"]),
        steps=_page_steps(login["steps"], credentials, name="session.login.steps"),
        success_selector=(
            str(login["successSelector"]).strip() if "successSelector" in login else None
        ),
        identity=json.dumps(login, sort_keys=True),
    )


def page_steps_from_raw(raw_steps: Sequence[Mapping[str, Any]]) -> tuple[PageStep, ...]:
    """Validated `steps` with literal values only (a parser's, parser_api.PageActions) as
    PageSteps, defaults filled in."""
    return _page_steps(raw_steps, None)


def _page_steps(
    raw_steps: Sequence[Mapping[str, Any]],
    credentials: Credentials | None,
    *,
    name: str = "steps",
) -> tuple[PageStep, ...]:
    """The validated `steps` as PageSteps, defaults filled in and sealed values opened; raise
    BadInput naming a step whose sealed value the row does not carry."""
    steps: list[PageStep] = []
    for position, raw in enumerate(raw_steps):
        action = str(raw["action"])
        pattern = raw.get("urlPattern")
        value = str(raw["value"]) if "value" in raw else None
        sealed_origins: tuple[str, ...] | None = None
        if "sealedValue" in raw:
            sealed = str(raw["sealedValue"])
            if credentials is None or sealed not in credentials.values:
                raise BadInput(
                    f"invalid payload: {name}[{position}].sealedValue {sealed!r} is not among the "
                    "row's sealed values (the operator seals them from the step's "
                    "valueFrom.secretKeyRef)",
                    reason="invalid_payload",
                )
            value = credentials.values[sealed]
            sealed_origins = credentials.origins
        steps.append(
            PageStep(
                action=action,
                timeout_seconds=float(raw.get("timeoutSeconds", DEFAULT_STEP_TIMEOUT_SECONDS)),
                selector=str(raw["selector"]).strip() if "selector" in raw else None,
                value=value,
                sealed_origins=sealed_origins,
                key=str(raw["key"]) if "key" in raw else None,
                wait_for_navigation=bool(raw.get("waitForNavigation", False)),
                wait_for=str(raw["waitFor"]).strip() if "waitFor" in raw else None,
                count=int(raw["count"]) if "count" in raw else None,
                max_rounds=int(
                    raw.get(
                        "maxClicks" if action == "loadMore" else "maxRounds",
                        DEFAULT_LOAD_MORE_CLICKS if action == "loadMore" else DEFAULT_SCROLL_ROUNDS,
                    )
                ),
                settle_seconds=float(raw.get("settleSeconds", DEFAULT_SETTLE_SECONDS)),
                state=str(raw.get("state", "visible")),
                url_pattern=compile_url_pattern(str(pattern)) if pattern is not None else None,
                idle_seconds=float(raw.get("idleSeconds", DEFAULT_IDLE_SECONDS)),
            )
        )
    return tuple(steps)


def _upstream_proxies(credentials: Credentials | None) -> tuple[UpstreamProxy, ...]:
    """The sealed proxy URLs as upstream proxies (the operator checked them; the message of a
    bad one names its position, never its text)."""
    proxies: list[UpstreamProxy] = []
    for position, url in enumerate(credentials.proxies if credentials else (), start=1):
        try:
            proxies.append(UpstreamProxy.parse(url))
        except ValueError:
            raise BadInput(
                f"the row's sealed upstream proxy {position} is not http:// or socks5://"
                "[user:password@]host:port",
                reason="invalid_payload",
            ) from None
    return tuple(proxies)


def _open_credentials(sealed: object, keys: SealingKeys | None) -> Credentials | None:
    # A retry, not a failure: during a key rotation another worker may hold the key already.
    if sealed is None:
        return None
    if keys is None:
        raise RetryLater(
            "the row has sealed credentials and this worker has no sealing key "
            "(SCRAPEQ_SEALING_KEY, the operator's key)",
            reason="credentials_unreadable",
        )
    try:
        return keys.open(str(sealed))
    except SealingError as error:
        raise RetryLater(
            f"cannot open the row's sealed credentials: {error}", reason="credentials_unreadable"
        ) from error


def _default_wait_until(options: Mapping[str, Any]) -> WaitUntil:
    return WAIT_UNTIL_WITH_WAIT_FOR if "waitFor" in options else CLASSIC_WAIT_UNTIL

"""No payload, however large, deep or malformed, makes the worker raise anything but its own
errors: `options_from_payload` either returns options or says what is wrong with the row."""

from __future__ import annotations

import itertools

import pytest
from scrapeq_queue.payload import PAYLOAD_OPTIONS, load_payload, validate_payload
from scrapeq_queue.sealed_credentials import SealingKeys
from scrapeq_worker.errors import BadInput, WorkerError
from scrapeq_worker.job_options import JobOptions, options_from_payload

HOSTILE_VALUES: list[object] = [
    10**5000,
    -(10**5000),
    10**16,
    float("inf"),
    float("-inf"),
    float("nan"),
    -1,
    0,
    1.5,
    True,
    None,
    "",
    " ",
    "x" * 300_000,
    "\r\n",
    "\x00",
    [],
    [[[[]]]],
    [{}],
    [10**5000],
    {},
    {"": ""},
    {"selector": 10**5000},
    {"selector": "a", "maxDepth": 10**5000, "maxPages": float("inf")},
    {"selector": "a", "maxDepth": 1000, "maxPages": 30},
    {"selector": "a", "include": ["(a+)+$", "\\1"], "extract": {"t": {"selector": []}}},
    {"maxConcurrentPerSite": float("nan"), "delaySeconds": -(10**5000)},
    {"t": {"selector": "h1", "attribute": 10**5000, "all": "yes"}},
    {"X-Header": "v\r\nInjected: 1"},
    {f"f{n}": "h1" for n in range(10_000)},
]

KEYS = SealingKeys.from_text(SealingKeys.generate())


# `checked=True` (ClaimedJob.options_checked) skips the worker's own check: a value no check
# saw still gives options or a worker error, never another exception.
@pytest.mark.parametrize("checked", [False, True], ids=["checked-here", "checked-by-claim"])
@pytest.mark.parametrize("option", sorted(PAYLOAD_OPTIONS))
def test_every_option_with_any_hostile_value_gives_options_or_a_worker_error(
    option: str, checked: bool
) -> None:
    outcomes: list[object] = []
    for value in HOSTILE_VALUES:
        try:
            outcomes.append(
                options_from_payload(
                    {option: value}, default_timeout_seconds=30, sealing_keys=KEYS, checked=checked
                )
            )
        except WorkerError as error:
            outcomes.append(error)
    assert all(isinstance(outcome, JobOptions | WorkerError) for outcome in outcomes)


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"render": False, "extract": {"title": "title"}},
        {
            "waitFor": "h1.name",
            "timeoutSeconds": 30,
            "steps": [
                {"action": "waitFor", "selector": "button.reveal"},
                {"action": "click", "selector": "button.reveal", "waitFor": ".price"},
                {"action": "scroll", "selector": "li.item", "count": 100, "maxRounds": 20},
            ],
            "items": {
                "selector": "div.product",
                "fields": {"price": {"selector": ".price", "transforms": [{"type": "price"}]}},
            },
            "follow": {"selector": "a.next", "maxDepth": 3, "include": ["/product/"]},
            "blockResources": ["image"],
        },
    ],
    ids=["empty", "static", "steps-items-follow"],
)
def test_options_the_claim_checked_read_as_a_full_check_reads_them(
    payload: dict[str, object],
) -> None:
    assert validate_payload(payload) == []
    assert options_from_payload(
        payload, default_timeout_seconds=30, sealing_keys=KEYS, checked=True
    ) == options_from_payload(payload, default_timeout_seconds=30, sealing_keys=KEYS)


@pytest.mark.parametrize(
    "payload",
    [
        *(value for value in HOSTILE_VALUES if value not in ({}, None)),
        {f"option{n}": n for n in range(5000)},
        dict(itertools.islice(zip(PAYLOAD_OPTIONS, HOSTILE_VALUES, strict=False), 20)),
    ],
    ids=lambda payload: type(payload).__name__,
)
def test_a_hostile_payload_as_a_whole_is_bad_input_with_a_bounded_message(
    payload: object,
) -> None:
    with pytest.raises(BadInput) as raised:
        options_from_payload(payload, default_timeout_seconds=30, sealing_keys=KEYS)
    assert raised.value.reason == "invalid_payload"
    assert len(raised.value.message) < 5000


@pytest.mark.parametrize(
    "text",
    [
        b'{"timeoutSeconds": ' + b"9" * 5000 + b"}",
        b'{"follow": ' + b"[" * 3000 + b"]" * 3000 + b"}",
        b'{"timeoutSeconds": 1' + b"0" * 400 + b"}",
    ],
)
def test_a_row_the_queue_could_not_load_is_bad_input_for_the_worker(text: bytes) -> None:
    with pytest.raises(BadInput, match="invalid payload: payload "):
        options_from_payload(load_payload(text), default_timeout_seconds=30)

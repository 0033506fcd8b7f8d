"""Credentials sealed into a row's payload: only a holder of the key reads them, only their
origins receive them."""

from __future__ import annotations

import pytest
from scrapeq_queue import validate_payload
from scrapeq_queue.sealed_credentials import (
    Credentials,
    SealingError,
    SealingKeys,
    credential_problems,
    origin_of,
)

SECRET = "s3cr3t-token-value"
CREDENTIALS = Credentials(
    origins=("https://shop.example:443",),
    headers={"Authorization": f"Bearer {SECRET}"},
    cookies={"session": SECRET},
)


def test_a_sealed_text_opens_to_the_same_credentials_and_shows_no_value() -> None:
    keys = SealingKeys.from_text(SealingKeys.generate())
    sealed = keys.seal(CREDENTIALS)
    assert SECRET not in sealed
    assert keys.open(sealed) == CREDENTIALS
    assert validate_payload({"sealed": sealed}) == []


def test_values_for_page_steps_are_sealed_and_opened_like_headers_and_never_shown() -> None:
    keys = SealingKeys.from_text(SealingKeys.generate())
    typed = Credentials(origins=("https://shop.example:443",), values={"login/password": SECRET})
    sealed = keys.seal(typed)
    assert SECRET not in sealed
    assert keys.open(sealed) == typed
    assert SECRET not in repr(keys.open(sealed))
    assert not typed.for_requests
    assert CREDENTIALS.for_requests


def test_the_same_credentials_seal_differently_every_time() -> None:
    keys = SealingKeys.from_text(SealingKeys.generate())
    assert keys.seal(CREDENTIALS) != keys.seal(CREDENTIALS)


def test_after_a_rotation_texts_sealed_with_the_older_key_still_open() -> None:
    old = SealingKeys.generate()
    sealed_before = SealingKeys.from_text(old).seal(CREDENTIALS)
    rotated = SealingKeys.from_text(f"{SealingKeys.generate()}, {old}")
    assert rotated.open(sealed_before) == CREDENTIALS
    sealed_after = rotated.seal(CREDENTIALS)
    with pytest.raises(SealingError, match="which this process does not hold"):
        SealingKeys.from_text(old).open(sealed_after)


def test_a_changed_sealed_text_is_refused() -> None:
    keys = SealingKeys.from_text(SealingKeys.generate())
    sealed = keys.seal(CREDENTIALS)
    flipped = sealed[:-3] + ("A" if sealed[-3] != "A" else "B") + sealed[-2:]
    with pytest.raises(SealingError, match="damaged"):
        keys.open(flipped)


def test_a_key_of_the_wrong_size_is_refused_without_echoing_it() -> None:
    with pytest.raises(SealingError, match="sealing key 1 is 5 bytes; it must be 32") as caught:
        SealingKeys.from_text("aGVsbG8=")
    assert "aGVsbG8" not in str(caught.value)
    with pytest.raises(SealingError, match="sealing key 2 is not base64"):
        SealingKeys.from_text(f"{SealingKeys.generate()},not*base64")


def test_credentials_apply_only_to_their_origins() -> None:
    assert CREDENTIALS.applies_to("https://shop.example/account?x=1")
    assert CREDENTIALS.applies_to("https://SHOP.example:443/")
    assert not CREDENTIALS.applies_to("http://shop.example/")
    assert not CREDENTIALS.applies_to("https://shop.example:8443/")
    assert not CREDENTIALS.applies_to("https://cdn.shop.example/")
    assert origin_of("ftp://shop.example/") is None
    assert SECRET not in repr(CREDENTIALS)


def test_unsendable_values_are_named_without_their_value() -> None:
    problems = credential_problems(
        {"X Bad": "ok", "Authorization": f"Bearer {SECRET}\n"}, {"session": f"{SECRET};x"}
    )
    assert problems == [
        "header name 'X Bad' is not a valid HTTP header name",
        "the value of header 'Authorization' contains a line break or control character",
        "the value of cookie 'session' has characters a cookie cannot carry "
        "(a semicolon, a line break, a control or non-ASCII character)",
    ]
    assert not any(SECRET in problem for problem in problems)


def test_a_payload_sealed_value_that_is_not_a_sealed_text_is_invalid() -> None:
    assert validate_payload({"sealed": "Bearer plain"}) == [
        "sealed must be a sealed credentials text (scrapeq-sealed:v1:...) made by the operator"
    ]

"""spec.credentials read from a Secret: sealed for the job's origins, or a clear reason why not
— never with a value in the message."""

from __future__ import annotations

from typing import Any

import pytest
from scrapeq_operator.credentials import sealed_credentials
from scrapeq_operator.errors import JobNotRunnableError
from scrapeq_queue.sealed_credentials import SealingKeys

pytestmark = pytest.mark.timeout(10)

SECRET = "t0ken-never-shown"
KEYS = SealingKeys.from_text(SealingKeys.generate())
SPEC: dict[str, Any] = {
    "credentials": {
        "secretRef": {"name": "shop-login"},
        "headers": {"Authorization": "auth"},
        "cookies": {"session": "cookie"},
    }
}
URLS = ["https://shop.example/a", "https://shop.example/b", "http://other.example:8080/"]


def reader(data: dict[str, bytes] | None) -> Any:
    async def read(namespace: str, name: str) -> dict[str, bytes] | None:
        assert (namespace, name) == ("shop", "shop-login")
        return data

    return read


async def test_the_secrets_values_are_sealed_for_the_origins_of_the_urls() -> None:
    data = {"auth": f"Bearer {SECRET}".encode(), "cookie": SECRET.encode()}
    sealed = await sealed_credentials(SPEC, "shop", URLS, reader(data), KEYS)
    assert sealed is not None
    assert SECRET not in sealed
    opened = KEYS.open(sealed)
    assert opened.origins == ("http://other.example:8080", "https://shop.example:443")
    assert opened.headers == {"Authorization": f"Bearer {SECRET}"}
    assert opened.cookies == {"session": SECRET}


async def test_a_job_without_credentials_seals_nothing() -> None:
    assert await sealed_credentials({}, "shop", URLS, reader(None), None) is None


@pytest.mark.parametrize(
    ("data", "keys", "reason", "message"),
    [
        ({}, None, "NoSealingKey", "the operator has no sealing key (SCRAPEQ_SEALING_KEY)"),
        (None, KEYS, "SecretNotFound", "Secret shop/shop-login does not exist"),
        (
            {"auth": SECRET.encode()},
            KEYS,
            "SecretKeyNotFound",
            "has no key 'cookie' for cookie 'session' (keys: auth)",
        ),
        (
            {"auth": f"{SECRET}\n".encode(), "cookie": SECRET.encode()},
            KEYS,
            "InvalidCredentials",
            "the value of header 'Authorization' contains a line break",
        ),
    ],
)
async def test_what_cannot_be_sealed_names_the_reason_and_never_the_value(
    data: dict[str, bytes] | None, keys: SealingKeys | None, reason: str, message: str
) -> None:
    with pytest.raises(JobNotRunnableError) as caught:
        await sealed_credentials(SPEC, "shop", URLS, reader(data), keys)
    assert caught.value.reason == reason
    assert message in caught.value.message
    assert not caught.value.permanent
    assert SECRET not in caught.value.message

"""spec.credentials read from a Secret: sealed for the job's origins, or a clear reason why not
— never with a value in the message."""

from __future__ import annotations

from typing import Any

import pytest
from scrapeq_operator.credentials import sealed_credentials
from scrapeq_operator.errors import JobNotRunnableError
from scrapeq_operator.job_spec import row_options
from scrapeq_queue import validate_payload
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


PROXY_SPEC: dict[str, Any] = {"proxy": {"secretRef": {"name": "shop-login"}}}
PROXY_URL = f"http://user:{SECRET}@proxy.example:3128"


async def test_the_proxy_list_is_sealed_with_the_credentials_or_alone() -> None:
    data = {
        "auth": b"Bearer x",
        "cookie": b"c",
        "proxies": f"# rotated per page\n{PROXY_URL}\n\nhttp://proxy2.example:8080\n".encode(),
    }
    both = await sealed_credentials({**SPEC, **PROXY_SPEC}, "shop", URLS, reader(data), KEYS)
    alone = await sealed_credentials(PROXY_SPEC, "shop", URLS, reader(data), KEYS)
    assert both is not None
    assert alone is not None
    assert SECRET not in both
    assert SECRET not in alone
    assert KEYS.open(both).proxies == (PROXY_URL, "http://proxy2.example:8080")
    assert KEYS.open(both).headers == {"Authorization": "Bearer x"}
    assert KEYS.open(alone).proxies == (PROXY_URL, "http://proxy2.example:8080")
    assert KEYS.open(alone).headers == {}


@pytest.mark.parametrize(
    ("spec", "data", "reason", "message"),
    [
        (PROXY_SPEC, {"other": b"x"}, "SecretKeyNotFound", "has no key 'proxies'"),
        (
            {"proxy": {"secretRef": {"name": "shop-login"}, "key": "list"}},
            {"proxies": PROXY_URL.encode()},
            "SecretKeyNotFound",
            "has no key 'list' with the proxy list (keys: proxies)",
        ),
        (
            PROXY_SPEC,
            {"proxies": f"{PROXY_URL}\nsocks4://user:{SECRET}@p:1080".encode()},
            "InvalidProxy",
            "line 2 is not an upstream proxy",
        ),
        (PROXY_SPEC, {"proxies": b"# nothing\n\n"}, "InvalidProxy", "lists no upstream proxy"),
        (
            PROXY_SPEC,
            {"proxies": f"http://user:{SECRET}@p:3128/path".encode()},
            "InvalidProxy",
            "line 1: an upstream proxy URL has no path",
        ),
    ],
    ids=["no-key", "named-key", "not-http-or-socks5", "empty", "path"],
)
async def test_a_proxy_list_that_cannot_be_used_names_the_line_and_never_its_text(
    spec: dict[str, Any], data: dict[str, bytes], reason: str, message: str
) -> None:
    with pytest.raises(JobNotRunnableError) as raised:
        await sealed_credentials(spec, "shop", URLS, reader(data), KEYS)
    assert raised.value.reason == reason
    assert message in raised.value.message
    assert "spec.proxy: Secret shop/shop-login" in raised.value.message
    assert SECRET not in raised.value.message


async def test_a_proxy_without_a_sealing_key_waits_for_one() -> None:
    with pytest.raises(JobNotRunnableError) as raised:
        await sealed_credentials(PROXY_SPEC, "shop", URLS, reader({}), None)
    assert raised.value.reason == "NoSealingKey"
    assert raised.value.message.startswith("spec.proxy:")


STEPS_SPEC: dict[str, Any] = {
    "steps": [
        {"action": "fill", "selector": "#user", "value": "ada"},
        {
            "action": "type",
            "selector": "#password",
            "valueFrom": {"secretKeyRef": {"name": "shop-login", "key": "password"}},
        },
    ]
}


async def test_a_steps_secret_value_is_sealed_under_the_name_its_row_step_gives() -> None:
    sealed = await sealed_credentials(
        STEPS_SPEC, "shop", URLS, reader({"password": SECRET.encode()}), KEYS
    )
    assert sealed is not None
    assert SECRET not in sealed
    opened = KEYS.open(sealed)
    assert opened.values == {"shop-login/password": SECRET}
    assert not opened.for_requests
    assert "https://shop.example:443" in opened.origins
    (_, typed) = row_options(STEPS_SPEC)["payload"]["steps"]
    assert typed == {
        "action": "type",
        "selector": "#password",
        "sealedValue": "shop-login/password",
    }
    assert validate_payload(row_options(STEPS_SPEC)["payload"]) == []


async def test_a_missing_key_for_a_step_is_named_without_any_value() -> None:
    with pytest.raises(JobNotRunnableError) as raised:
        await sealed_credentials(STEPS_SPEC, "shop", URLS, reader({"user": SECRET.encode()}), KEYS)
    assert raised.value.reason == "SecretKeyNotFound"
    assert "spec.steps[1].valueFrom: Secret shop/shop-login has no key 'password'" in str(
        raised.value.message
    )
    assert SECRET not in str(raised.value.message)


async def test_steps_with_secret_values_need_the_sealing_key() -> None:
    with pytest.raises(JobNotRunnableError) as raised:
        await sealed_credentials(STEPS_SPEC, "shop", URLS, reader({}), None)
    assert raised.value.reason == "NoSealingKey"
    assert raised.value.message.startswith("spec.steps: the operator has no sealing key")


async def test_a_login_steps_secret_value_is_sealed_for_the_login_pages_origin_too() -> None:
    spec = {"session": {"login": {"url": "https://login.example/sign-in", **STEPS_SPEC}}}
    sealed = await sealed_credentials(
        spec, "shop", URLS, reader({"password": SECRET.encode()}), KEYS
    )
    assert sealed is not None
    opened = KEYS.open(sealed)
    assert opened.values == {"shop-login/password": SECRET}
    assert "https://login.example:443" in opened.origins
    payload = row_options(spec)["payload"]
    assert payload["session"]["login"]["steps"][1]["sealedValue"] == "shop-login/password"
    assert "valueFrom" not in str(payload)
    assert validate_payload(payload) == []


async def test_a_route_s_steps_secret_value_is_sealed_and_its_row_step_names_it() -> None:
    spec = {
        "follow": {"selector": "a", "label": "detail"},
        "routes": {"detail": {**STEPS_SPEC, "extract": {"name": "h1"}}},
    }
    sealed = await sealed_credentials(
        spec, "shop", URLS, reader({"password": SECRET.encode()}), KEYS
    )
    assert sealed is not None
    assert KEYS.open(sealed).values == {"shop-login/password": SECRET}
    payload = row_options(spec)["payload"]
    (_, typed) = payload["routes"]["detail"]["steps"]
    assert typed["sealedValue"] == "shop-login/password"
    assert "valueFrom" not in str(payload)
    assert validate_payload(payload) == []
    with pytest.raises(JobNotRunnableError) as raised:
        await sealed_credentials(spec, "shop", URLS, reader({}), None)
    assert raised.value.message.startswith("spec.routes.detail.steps: the operator has no")

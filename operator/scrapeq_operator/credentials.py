"""spec.credentials, spec.proxy and the steps' valueFrom: headers, cookies, upstream proxies and
values to type read from Secrets and sealed into the rows' payload.

The operator is the only reader of the Secret. It seals the values at once with the sealing key
(scrapeq_queue.sealed_credentials) and never puts them in a message, a condition, an Event or
a log line: errors name the Secret, the key and the header or cookie, never a value.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kubernetes.client.rest import ApiException
from scrapeq_queue.sealed_credentials import (
    SEALING_KEY_ENV,
    Credentials,
    SealingKeys,
    credential_problems,
    origin_of,
    parse_proxy_list,
)

from scrapeq_operator.errors import JobNotRunnableError
from scrapeq_operator.job_spec import sealed_value_name

SecretReader = Callable[[str, str], Awaitable[dict[str, bytes] | None]]


# The key of a spec.proxy Secret holding the proxy list when spec.proxy.key is not given.
DEFAULT_PROXY_KEY = "proxies"


async def sealed_credentials(
    spec: Mapping[str, Any],
    namespace: str,
    urls: list[str],
    read_secret: SecretReader,
    keys: SealingKeys | None,
) -> str | None:
    """The job's spec.credentials, spec.proxy and its steps' Secret values as one sealed text for
    `payload.sealed` (None without any).

    Raises JobNotRunnableError (retried: the Secret or the key may be created or fixed later)
    with reason NoSealingKey, SecretNotFound, SecretNotReadable, SecretKeyNotFound,
    InvalidCredentials or InvalidProxy.
    """
    wanted = spec.get("credentials")
    proxy = spec.get("proxy")
    step_values = _step_references(spec)
    if not wanted and not proxy and not step_values:
        return None
    if keys is None:
        field = (
            "spec.credentials"
            if wanted
            else "spec.proxy"
            if proxy
            else next(iter(step_values.values()))[0].split("[", 1)[0]
        )
        raise JobNotRunnableError(
            "NoSealingKey",
            f"{field}: the operator has no sealing key ({SEALING_KEY_ENV}), so it "
            "cannot store credentials encrypted; install the chart's sealing key "
            "(docs/chart.md) and restart the operator",
        )
    headers: dict[str, str] = {}
    cookies: dict[str, str] = {}
    if wanted:
        where = f"spec.credentials: Secret {namespace}/{wanted['secretRef']['name']}"
        data = await _secret(read_secret, namespace, str(wanted["secretRef"]["name"]), where)
        headers = _values(data, wanted.get("headers") or {}, where, "header")
        cookies = _values(data, wanted.get("cookies") or {}, where, "cookie")
        problems = credential_problems(headers, cookies)
        if problems:
            raise JobNotRunnableError("InvalidCredentials", f"{where}: " + "; ".join(problems))
    proxies: tuple[str, ...] = ()
    if proxy:
        key = str(proxy.get("key") or DEFAULT_PROXY_KEY)
        where = f"spec.proxy: Secret {namespace}/{proxy['secretRef']['name']}"
        data = await _secret(read_secret, namespace, str(proxy["secretRef"]["name"]), where)
        if key not in data:
            raise JobNotRunnableError(
                "SecretKeyNotFound",
                f"{where} has no key {key!r} with the proxy list (keys: "
                f"{', '.join(sorted(data)) or 'none'})",
            )
        try:
            proxies = parse_proxy_list(data[key].decode("utf-8"))
        except UnicodeDecodeError:
            raise JobNotRunnableError(
                "InvalidProxy", f"{where}: key {key!r} is not UTF-8"
            ) from None
        except ValueError as error:
            raise JobNotRunnableError("InvalidProxy", f"{where}, key {key!r}: {error}") from None
    values: dict[str, str] = {}
    for name, (step, reference) in step_values.items():
        where = f"{step}.valueFrom: Secret {namespace}/{reference['name']}"
        data = await _secret(read_secret, namespace, str(reference["name"]), where)
        values.update(_values(data, {name: str(reference["key"])}, where, "step value"))
    login = (spec.get("session") or {}).get("login") or {}
    # The login page is the job's site too: the values its steps type are typed there.
    pages = [*urls, str(login["url"])] if login.get("url") else urls
    origins = sorted({origin for origin in map(origin_of, pages) if origin is not None})
    return keys.seal(
        Credentials(
            origins=tuple(origins),
            headers=headers,
            cookies=cookies,
            proxies=proxies,
            values=values,
        )
    )


def _step_references(spec: Mapping[str, Any]) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """The Secret keys that spec.steps, spec.session.login.steps and the routes' steps type, by
    the name they are sealed under, with where the first step naming each is."""
    references: dict[str, tuple[str, Mapping[str, Any]]] = {}
    login = (spec.get("session") or {}).get("login") or {}
    routes = spec.get("routes") or {}
    for name, steps in (
        ("spec.steps", spec.get("steps")),
        ("spec.session.login.steps", login.get("steps")),
        *((f"spec.routes.{label}.steps", route.get("steps")) for label, route in routes.items()),
    ):
        for position, step in enumerate(steps or ()):
            reference = (step.get("valueFrom") or {}).get("secretKeyRef")
            if reference:
                references.setdefault(
                    sealed_value_name(reference), (f"{name}[{position}]", reference)
                )
    return references


async def _secret(
    read_secret: SecretReader, namespace: str, name: str, where: str
) -> dict[str, bytes]:
    try:
        data = await read_secret(namespace, name)
    except ApiException as error:
        if error.status != 403:
            raise
        raise JobNotRunnableError(
            "SecretNotReadable",
            f"{where} may not be read by the operator (its RBAC needs get on secrets in "
            f"this namespace)",
        ) from None
    if data is None:
        raise JobNotRunnableError(
            "SecretNotFound", f"{where} does not exist (the job starts once it is created)"
        )
    return data


def _values(
    data: Mapping[str, bytes], names: Mapping[str, str], where: str, kind: str
) -> dict[str, str]:
    """Header or cookie name -> its value from the Secret key the spec names."""
    values: dict[str, str] = {}
    for name, key in names.items():
        if key not in data:
            keys = ", ".join(sorted(data)) or "none"
            raise JobNotRunnableError(
                "SecretKeyNotFound",
                f"{where} has no key {key!r} for {kind} {name!r} (keys: {keys})",
            )
        try:
            values[str(name)] = data[key].decode("utf-8")
        except UnicodeDecodeError:
            raise JobNotRunnableError(
                "InvalidCredentials", f"{where}: key {key!r} for {kind} {name!r} is not UTF-8"
            ) from None
    return values

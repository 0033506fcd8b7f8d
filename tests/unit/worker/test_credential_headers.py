"""Which requests carry a job's credentials: those to their origins, no others."""

from __future__ import annotations

from scrapeq_queue.sealed_credentials import Credentials
from scrapeq_worker.credential_headers import request_headers

CREDENTIALS = Credentials(
    origins=("https://shop.example:443",),
    headers={"Authorization": "Bearer t0ken"},
    cookies={"session": "c00kie"},
)


def test_a_request_to_the_origin_gets_the_headers_and_cookies() -> None:
    headers = request_headers({"Accept": "*/*"}, "https://shop.example/a", CREDENTIALS)
    assert headers == {
        "Accept": "*/*",
        "Authorization": "Bearer t0ken",
        "Cookie": "session=c00kie",
    }


def test_the_sites_own_cookies_stay_and_one_of_the_same_name_gives_way() -> None:
    headers = request_headers(
        {"cookie": "theme=dark; session=old"}, "https://shop.example/a", CREDENTIALS
    )
    assert headers == {"Authorization": "Bearer t0ken", "Cookie": "theme=dark; session=c00kie"}


def test_a_request_elsewhere_loses_credentials_it_carries_along() -> None:
    carried = {"Authorization": "Bearer t0ken", "Cookie": "session=c00kie; lang=en", "A": "b"}
    assert request_headers(carried, "https://evil.example/", CREDENTIALS) == {
        "A": "b",
        "Cookie": "lang=en",
    }


def test_requests_without_credentials_are_left_alone() -> None:
    assert request_headers({"A": "b"}, "https://evil.example/", CREDENTIALS) is None
    assert request_headers({"A": "b"}, "https://shop.example/", None) is None

"""The SSRF guard refuses internal addresses and odd schemes, and honours the allow-list."""

from __future__ import annotations

import ipaddress

import pytest
from scrapeq_worker.errors import BlockedRequest
from scrapeq_worker.network_guard import NetworkGuard, denial_reason, parse_networks


@pytest.mark.parametrize(
    ("address", "label"),
    [
        ("169.254.169.254", "link-local (cloud metadata)"),
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("::1", "loopback"),
        ("fd00::1", "private (unique local)"),
        ("fe80::1", "link-local"),
        ("::", "unspecified"),
        ("::ffff:127.0.0.1", "loopback"),
        ("64:ff9b::a9fe:a9fe", "link-local (cloud metadata)"),
        # 6to4 (2002:V4ADDR::/48) reaches the IPv4 address it embeds, through a relay.
        ("2002:a9fe:a9fe::1", "link-local (cloud metadata)"),
        ("2002:c0a8:0101::1", "private"),
        ("2002:7f00:0001::", "loopback"),
        ("198.18.0.1", "not globally routable"),
    ],
)
def test_internal_addresses_are_denied_with_a_named_reason(address: str, label: str) -> None:
    assert denial_reason(ipaddress.ip_address(address)) == label


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "2002:0808:0808::1"]
)
def test_public_addresses_pass(address: str) -> None:
    assert denial_reason(ipaddress.ip_address(address)) is None


def test_the_allow_list_exempts_exactly_its_networks() -> None:
    guard = NetworkGuard(allow_networks=parse_networks("127.0.0.2/32, ::1/128"))
    guard.check_address(ipaddress.ip_address("127.0.0.2"), url="http://127.0.0.2/")
    guard.check_address(ipaddress.ip_address("::1"), url="http://[::1]/")
    with pytest.raises(BlockedRequest, match=r"127\.0\.0\.1 is a loopback address"):
        guard.check_address(ipaddress.ip_address("127.0.0.1"), url="http://127.0.0.1/")


def test_a_6to4_address_wrapping_an_internal_one_is_blocked() -> None:
    guard = NetworkGuard()
    with pytest.raises(
        BlockedRequest, match=r"2002:a9fe:a9fe::1 is a link-local \(cloud metadata\)"
    ):
        guard.check_address(
            ipaddress.ip_address("2002:a9fe:a9fe::1"), url="http://[2002:a9fe:a9fe::1]/"
        )


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/", "chrome://crash", "javascript:alert(1)"]
)
def test_only_http_and_https_are_allowed(url: str) -> None:
    with pytest.raises(BlockedRequest) as refused:
        NetworkGuard().check_scheme(url)
    assert refused.value.reason == "blocked_scheme"
    assert "only http and https" in refused.value.message


async def test_an_ip_literal_is_judged_without_any_lookup() -> None:
    with pytest.raises(BlockedRequest) as refused:
        await NetworkGuard().check_url("http://169.254.169.254/latest/meta-data/")
    assert refused.value.reason == "blocked_address"
    assert "cloud metadata" in refused.value.message


async def test_a_name_is_judged_by_the_addresses_it_resolves_to() -> None:
    with pytest.raises(BlockedRequest, match="loopback"):
        await NetworkGuard().check_url("http://localhost:8080/")


def test_a_malformed_allow_list_names_the_bad_entry() -> None:
    with pytest.raises(ValueError, match=r"'10\.0\.0\.0/33'"):
        parse_networks("127.0.0.0/8,10.0.0.0/33")


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://[::1/", "Invalid IPv6 URL"),
        ("http://shop.example:0/", "has port 0"),
        ("https://shop..example/img.png", "is not a valid DNS name"),
    ],
)
def test_a_redirect_hop_or_request_no_engine_can_fetch_is_a_bad_url(
    url: str, fragment: str
) -> None:
    with pytest.raises(BlockedRequest, match=fragment) as refused:
        NetworkGuard().check_scheme(url)
    assert refused.value.reason == "bad_url"


def test_a_pages_own_long_request_is_not_held_to_a_rows_length() -> None:
    url = "https://shop.example/pixel?" + "a" * 20_000
    assert NetworkGuard().check_scheme(url) == ("https", "shop.example", 443)

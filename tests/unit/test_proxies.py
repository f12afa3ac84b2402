"""TRUSTED_PROXIES: addresses and CIDR ranges, IPv4 and IPv6, read once at start; whose
X-Forwarded-For and X-Forwarded-Proto are believed (api/ratelimit.py, ForwardedProtoMiddleware).
Live, against gunicorn: tests/live/test_trusted_proxies.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from receiptsite.api.ratelimit import address_of, client_address
from receiptsite.config import ConfigurationError, trusted_proxies
from receiptsite.middleware import ForwardedProtoMiddleware

pytestmark = pytest.mark.unit


def test_trusted_proxies_take_addresses_and_ranges_of_both_families() -> None:
    parsed = trusted_proxies(" 10.0.0.7, 10.1.0.0/16 ,fd00::/8, ::1, 192.0.2.0/255.255.255.0")
    assert [str(network) for network in parsed] == [
        "10.0.0.7/32", "10.1.0.0/16", "fd00::/8", "::1/128", "192.0.2.0/24"
    ]
    assert trusted_proxies("") == () and trusted_proxies(" , ") == ()


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("proxy.internal", "'proxy.internal' does not appear to be an IPv4 or IPv6 network"),
        ("10.0.0.1/24", "10.0.0.1/24 has host bits set"),
        ("10.0.0.0/33", "'10.0.0.0/33'"),
        ("fd00::/129", "'fd00::/129'"),
        ("*", "not '*'"),
        ("10.0.0.7 10.0.0.8", "not '10.0.0.7 10.0.0.8'"),
        ("127.0.0.1, localhost", "not 'localhost'"),
    ],
)
def test_what_trusted_proxies_cannot_parse_is_refused_naming_the_variable(
    value: str, words: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        trusted_proxies(value)
    assert caught.value.variable == "TRUSTED_PROXIES"
    assert str(caught.value).startswith("TRUSTED_PROXIES takes IP addresses and CIDR ranges")
    assert words in str(caught.value)


def request(peer: str, **headers: str) -> HttpRequest:
    return RequestFactory().get("/", REMOTE_ADDR=peer, headers=headers)


def test_x_forwarded_for_is_believed_from_a_proxy_in_a_listed_range(settings: Any) -> None:
    settings.TRUSTED_PROXIES = trusted_proxies("10.0.0.0/24")
    assert client_address(request("10.0.0.7", x_forwarded_for="203.0.113.9")) == "203.0.113.9"
    # From anyone else it is not believed.
    assert client_address(request("10.0.1.7", x_forwarded_for="203.0.113.9")) == "10.0.1.7"
    assert client_address(request("198.51.100.3", x_forwarded_for="10.0.0.9")) == "198.51.100.3"


def test_x_forwarded_for_is_read_from_the_right_skipping_trusted_hops(settings: Any) -> None:
    settings.TRUSTED_PROXIES = trusted_proxies("10.0.0.0/24, fd00::/8")
    # What the client wrote itself sits left of the address the first proxy saw: never reached.
    spoofed = "198.51.100.1, 203.0.113.9"
    assert client_address(request("10.0.0.7", x_forwarded_for=spoofed)) == "203.0.113.9"
    # Two proxies of the site: the inner one is skipped too.
    chained = "203.0.113.9, 10.0.0.8"
    assert client_address(request("10.0.0.7", x_forwarded_for=chained)) == "203.0.113.9"
    # Every hop a proxy of the site: the farthest is the client.
    inside = "10.0.0.9, 10.0.0.8"
    assert client_address(request("10.0.0.7", x_forwarded_for=inside)) == "10.0.0.9"
    # No header: the proxy itself.
    assert client_address(request("10.0.0.7")) == "10.0.0.7"
    # A hop that is no address ends the reading: the proxy that reported it is the client.
    assert client_address(request("10.0.0.7", x_forwarded_for="unknown, 10.0.0.8")) == "10.0.0.8"


def test_ipv6_proxies_ports_and_mapped_addresses_are_read(settings: Any) -> None:
    settings.TRUSTED_PROXIES = trusted_proxies("fd00::/8, 10.0.0.0/24")
    assert client_address(request("fd00::5", x_forwarded_for="2001:db8::7")) == "2001:db8::7"
    assert client_address(request("fd00::5", x_forwarded_for="[2001:db8::7]:4711")) == (
        "2001:db8::7"
    )
    assert client_address(request("fd00::5", x_forwarded_for="203.0.113.9:4711")) == (
        "203.0.113.9"
    )
    # A dual-stack socket reports an IPv4 proxy as ::ffff:10.0.0.7: it is still 10.0.0.7.
    assert client_address(request("::ffff:10.0.0.7", x_forwarded_for="2001:db8::7")) == (
        "2001:db8::7"
    )
    assert client_address(request("2001:db8::1", x_forwarded_for="203.0.113.9")) == "2001:db8::1"
    assert str(address_of("::FFFF:192.0.2.1")) == "192.0.2.1"
    assert address_of("proxy.internal") is None and address_of("") is None


def scheme_seen(peer: str, **headers: str) -> bool:
    seen: list[bool] = []

    def view(request: HttpRequest) -> HttpResponse:
        seen.append(request.is_secure())
        return HttpResponse()

    ForwardedProtoMiddleware(view)(request(peer, **headers))
    return seen[0]


def test_x_forwarded_proto_is_believed_from_a_listed_proxy_only(settings: Any) -> None:
    settings.TRUSTED_PROXIES = trusted_proxies("10.0.0.0/24, fd00::/8")
    assert scheme_seen("10.0.0.7", x_forwarded_proto="https") is True
    assert scheme_seen("fd00::5", x_forwarded_proto="HTTPS") is True
    assert scheme_seen("10.0.0.7", x_forwarded_proto="https, http") is True  # the outermost
    assert scheme_seen("10.0.0.7", x_forwarded_proto="http") is False
    assert scheme_seen("10.0.0.7") is False
    # Anyone else's is ignored: the connection's own scheme.
    assert scheme_seen("10.0.1.7", x_forwarded_proto="https") is False
    assert scheme_seen("203.0.113.9", x_forwarded_proto="https") is False
    settings.TRUSTED_PROXIES = ()
    assert scheme_seen("10.0.0.7", x_forwarded_proto="https") is False

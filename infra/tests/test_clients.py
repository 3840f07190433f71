"""A client's address: the socket's, or behind trusted proxies the entry the outermost one appended."""

from __future__ import annotations

from django.test import RequestFactory

from infra.clients import address_of, request_address, scope_address


def test_without_a_configured_header_the_socket_address_stands(settings):
    settings.RAG_CLIENTS = {"ADDRESS_HEADER": "", "TRUSTED_PROXIES": 1}
    assert address_of("10.0.0.1", "198.51.100.7") == "10.0.0.1"
    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.7")
    assert request_address(request) == "10.0.0.1"


def test_behind_trusted_proxies_the_entry_they_appended_counts_from_the_right(settings):
    settings.RAG_CLIENTS = {"ADDRESS_HEADER": "X-Forwarded-For", "TRUSTED_PROXIES": 2}
    assert address_of("10.0.0.1", "6.6.6.6, 198.51.100.7, 10.0.0.9") == "198.51.100.7"
    assert address_of("10.0.0.1", "198.51.100.7") == "198.51.100.7"  # fewer entries than proxies: the first
    assert address_of("10.0.0.1", None) == "10.0.0.1" and address_of("10.0.0.1", " , ") == "10.0.0.1"
    scope = {"client": ("10.0.0.1", 5000), "headers": [(b"x-forwarded-for", b"6.6.6.6, 198.51.100.7"),
                                                       (b"x-forwarded-for", b"10.0.0.9")]}
    assert scope_address(scope) == "198.51.100.7"
    assert scope_address({"client": None, "headers": []}) == ""

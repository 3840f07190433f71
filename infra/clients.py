"""Who is asking: a client's address, from the socket or, behind proxies, from the header they are trusted to set.

Limits keyed on the socket address alone would, behind a load balancer, lump every client together (one bad
client locking all out). With `RAG_CLIENT_ADDRESS_HEADER` set (for example `X-Forwarded-For`), the address is
the entry that the outermost of the `RAG_TRUSTED_PROXIES` proxies appended: counted from the right, since a
client can write anything to the left of what the proxies add. Without the header (a direct connection, or a
request that bypassed the proxy) the socket address stands.
"""

from __future__ import annotations

from django.conf import settings


def address_of(remote: str, forwarded: str | None) -> str:
    """The client address from the socket's `remote` and the trusted header's value (None: not sent)."""
    header = settings.RAG_CLIENTS["ADDRESS_HEADER"]
    if not header or not forwarded:
        return remote or ""
    entries = [entry.strip() for entry in forwarded.split(",") if entry.strip()]
    if not entries:
        return remote or ""
    hops = settings.RAG_CLIENTS["TRUSTED_PROXIES"]
    return entries[max(0, len(entries) - hops)]


def request_address(request) -> str:
    """The client address of a Django request."""
    header = settings.RAG_CLIENTS["ADDRESS_HEADER"]
    meta_name = "HTTP_" + header.upper().replace("-", "_") if header else ""
    return address_of(request.META.get("REMOTE_ADDR", ""), request.META.get(meta_name) if meta_name else None)


def scope_address(scope: dict) -> str:
    """The client address of an ASGI connection scope (HTTP or WebSocket)."""
    remote = (scope.get("client") or ("", 0))[0] or ""
    header = settings.RAG_CLIENTS["ADDRESS_HEADER"].lower().encode("latin-1")
    forwarded = None
    if header:
        values = [value.decode("latin-1") for name, value in scope.get("headers") or () if name.lower() == header]
        forwarded = ", ".join(values) if values else None
    return address_of(remote, forwarded)

"""Site-wide protections as middleware: the Content Security Policy, and sign-in throttling (below).

Every HTML response carries a policy, the default unless its view set its own.

The chat page sets its own (assistant/views.py, which adds its WebSocket); a self-contained document (a report
kept as one HTML file, styles inline) sets `SELF_CONTAINED_DOCUMENT_POLICY` with `self_contained_document`.
"""

from django.utils.deprecation import MiddlewareMixin

HEADER = "Content-Security-Policy"

# The site's own scripts, styles, images and fetches only: no inline script or style, no framing by any page.
DEFAULT_POLICY = "; ".join([
    "default-src 'self'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:", "object-src 'none'",
    "base-uri 'none'", "form-action 'self'", "frame-ancestors 'none'",
])

# A report saved or downloaded as one file carries its styles inline; it runs no script and loads nothing.
SELF_CONTAINED_DOCUMENT_POLICY = "; ".join([
    "default-src 'none'", "style-src 'unsafe-inline'", "img-src data:", "base-uri 'none'", "form-action 'none'",
    "frame-ancestors 'none'",
])


def self_contained_document(response):
    """Give a response holding a self-contained HTML document (inline styles, no script) its policy."""
    response[HEADER] = SELF_CONTAINED_DOCUMENT_POLICY
    return response


class ContentSecurityPolicyMiddleware(MiddlewareMixin):
    """Set the default policy on every HTML response whose view did not set its own (sync and async)."""

    def process_response(self, request, response):
        if HEADER not in response and response.get("Content-Type", "").startswith("text/html"):
            response[HEADER] = DEFAULT_POLICY
        return response


# -- sign-in throttling -------------------------------------------------------------------------------------


def _login_paths() -> tuple[str, ...]:
    from django.conf import settings
    from django.urls import reverse

    return (settings.LOGIN_URL, reverse("admin:login"))


def _failure_keys(address: str, username: str) -> tuple[str, str]:
    import hashlib

    name = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:16]
    # Moving window logs (infra.limits.window_hit), named apart from the plain counters kept here before issue 28.
    return f"login:attempts:{address}", f"login:attempts:{address}:{name}"


def _attempt(request, address: str, username: str):
    """Count one sign-in attempt, before its password is checked, against the address and the address and user
    name (moving windows of RAG_LOGIN_THROTTLE's WINDOW_SECONDS); the WindowHit, not admitted when either is full."""
    from django.conf import settings

    from infra.limits import window_hit

    limit, window = settings.RAG_LOGIN_THROTTLE["FAILURE_LIMIT"], settings.RAG_LOGIN_THROTTLE["WINDOW_SECONDS"]
    by_address, by_name = _failure_keys(address, username)
    hits = (window_hit([by_name], limit=limit, window=window), window_hit([by_address], limit=4 * limit, window=window))
    if all(hit.admitted for hit in hits):
        return hits
    _give_back(hits)
    return None


def _give_back(hits) -> None:
    from infra.limits import window_give_back

    for hit in hits:
        window_give_back(hit)


def login_failed(sender, credentials, request=None, **kwargs) -> None:
    """user_login_failed: the failure stays counted; a sign-in form that the middleware did not count first
    (any other form of the site) counts it now."""
    if request is None:
        return
    from infra.clients import request_address

    attempt = getattr(request, "_login_attempt", None)
    if attempt is not None:
        attempt["failed"] = True
        return
    _attempt(request, request_address(request), str(credentials.get("username", "")))


def login_succeeded(sender, request=None, user=None, **kwargs) -> None:
    """user_logged_in: this attempt is given back, and the user name's failures from this address are forgiven."""
    if request is None or user is None:
        return
    from django.core.cache import cache

    from infra.clients import request_address

    attempt = getattr(request, "_login_attempt", None)
    if attempt is not None and not attempt["failed"]:
        _give_back(attempt["hits"])
        attempt["hits"] = ()
    cache.delete(_failure_keys(request_address(request), user.get_username())[1])


class LoginThrottleMiddleware(MiddlewareMixin):
    """Refuse sign-in attempts at /ops/login/ and /admin/login/ with 429 and Retry-After once an address has
    failed RAG_LOGIN_FAILURE_LIMIT times for one user name (or four times that for any) within the window, before
    the password is even checked, so passwords cannot be guessed at speed.

    Each attempt is counted first, as a failure, and then checked (issue 28): concurrent attempts each take
    their own place in the count, so no more than the limit are ever checked. A sign-in that succeeds, or a post
    that never reached a password check (a form error), gives its place back. Django's user_login_failed signal
    counts the failures of every other sign-in form of the site the same way."""

    def __init__(self, get_response):
        super().__init__(get_response)
        from django.contrib.auth.signals import user_logged_in, user_login_failed

        user_login_failed.connect(login_failed, dispatch_uid="infra.security.login_failed")
        user_logged_in.connect(login_succeeded, dispatch_uid="infra.security.login_succeeded")

    def process_request(self, request):
        if request.method != "POST" or request.path not in _login_paths():
            return None
        from django.conf import settings
        from django.http import HttpResponse

        from infra.clients import request_address

        window = settings.RAG_LOGIN_THROTTLE["WINDOW_SECONDS"]
        hits = _attempt(request, request_address(request), request.POST.get("username", ""))
        if hits is not None:
            request._login_attempt = {"hits": hits, "failed": False}
            return None
        response = HttpResponse(
            "<!doctype html><title>Too many sign-in attempts</title><h1>Too many sign-in attempts</h1>"
            f"<p>Too many failed sign-ins from this address. Try again in {window // 60} minutes.</p>",
            status=429, content_type="text/html; charset=utf-8")
        response["Retry-After"] = str(window)
        response["X-Error-Code"] = "too_many_login_attempts"
        return response

    def process_response(self, request, response):
        attempt = getattr(request, "_login_attempt", None)
        if attempt is not None and not attempt["failed"]:
            _give_back(attempt["hits"])  # no password was checked, or it was right (then given back already)
            attempt["hits"] = ()
        return response

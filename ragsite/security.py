"""The site's Content Security Policy: every HTML response carries one, the default unless its view set its own.

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

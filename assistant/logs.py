"""A refused request (a bad Host header, a 403, a suspicious body) is logged as one line, without a traceback:
it is the client's mistake or probe, not a failure of the server, and a scan would fill the log with stacks."""

from __future__ import annotations

import logging

from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.http.multipartparser import MultiPartParserError

REFUSALS = (BadRequest, PermissionDenied, SuspiciousOperation, MultiPartParserError)


class OneLineRefusals(logging.Filter):
    """Drop the traceback of a record whose exception is a refusal of the request; keep the record."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc_info = record.exc_info
        if exc_info and isinstance(exc_info[1], REFUSALS):
            record.msg = f"{record.msg} ({type(exc_info[1]).__name__})"
            record.exc_info, record.exc_text = None, None
        return True


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found


def install() -> None:
    """Put the filter on the loggers Django reports refusals to (django.request; django.security.<exception>).
    A logger's filter runs before any handler sees the record, including handlers added later (tests, Sentry)."""
    refusal = OneLineRefusals()
    names = {"django.request", "django.security.SuspiciousOperation"} | {
        f"django.security.{cls.__name__}" for cls in _subclasses(SuspiciousOperation)}
    for name in sorted(names):
        logger = logging.getLogger(name)
        if not any(isinstance(f, OneLineRefusals) for f in logger.filters):
            logger.addFilter(refusal)

"""The JSON parser of every DRF view (settings.REST_FRAMEWORK): DRF's own, which refuses NaN and Infinity, with a
body nested deeper than Python's stack refused as unparseable too (a 400 on each face) instead of a 500."""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.parsers import JSONParser


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError("The body is nested too deeply.") from None

"""Placeholder: the JSDoc and TypeDoc readers are being written (issue 27)."""

from ..docmodel import DocPage, RawPage


class JsDocReader:
    name = "jsdoc"

    def matches(self, page: RawPage) -> bool:
        return False

    def run(self, page: RawPage) -> DocPage:
        raise NotImplementedError


class TypeDocReader:
    name = "typedoc"

    def matches(self, page: RawPage) -> bool:
        return False

    def run(self, page: RawPage) -> DocPage:
        raise NotImplementedError

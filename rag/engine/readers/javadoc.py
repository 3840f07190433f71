"""Placeholder: the javadoc reader is being written (issue 27)."""

from ..docmodel import DocPage, RawPage


class JavadocReader:
    name = "javadoc"

    def matches(self, page: RawPage) -> bool:
        return False

    def run(self, page: RawPage) -> DocPage:
        raise NotImplementedError

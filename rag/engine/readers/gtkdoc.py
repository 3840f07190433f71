"""Placeholder: the gtkdoc reader is being written (issue 27)."""

from ..docmodel import DocPage, RawPage


class GtkDocReader:
    name = "gtkdoc"

    def matches(self, page: RawPage) -> bool:
        return False

    def run(self, page: RawPage) -> DocPage:
        raise NotImplementedError

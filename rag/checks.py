"""System checks of the engine's settings (`manage.py check`, and every server start)."""

from __future__ import annotations

from django.conf import settings
from django.core import checks


@checks.register()
def routes_import(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """Every route RAG_ROUTES lists imports (rag.engine.routes.load_routes)."""
    from rag.engine.routes import load_routes

    paths = settings.RAG_ENGINE.get("ROUTES") or ()
    try:
        load_routes(paths)
    except ValueError as exc:
        return [checks.Error(str(exc), hint="RAG_ROUTES lists routes by dotted path: package.module.Class.",
                             id="rag.E001")]
    return []

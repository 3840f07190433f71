"""`manage.py retrievalapp create|list`: the retrieval apps of the open retrieval API (the admin does the same)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from infra.errors import ServiceError
from rag.models import RetrievalApp
from rag.services.retrieval import retrieval_app_create


class Command(BaseCommand):
    help = "Create or list retrieval apps: the knowledge bases a bound API key may search, and their defaults."

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="action", required=True)
        create = commands.add_parser("create", help="Create a published app and print its id")
        create.add_argument("--name", required=True, help="What the app is for")
        create.add_argument("--kb", action="append", required=True, help="A knowledge base slug (repeatable)")
        create.add_argument("--setting", default="{}", help='Default rag_setting as JSON, e.g. \'{"top_n": 5}\'')
        create.add_argument("--unpublished", action="store_true", help="Create it unpublished (it answers nothing)")
        commands.add_parser("list", help="List apps with their knowledge bases")

    def handle(self, *args, action, **options):
        try:
            getattr(self, f"_{action}")(**options)
        except ServiceError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None

    def _create(self, *, name, kb, setting, unpublished, **_):
        try:
            rag_setting = json.loads(setting)
        except ValueError:
            raise CommandError("--setting must be a JSON object.") from None
        if not isinstance(rag_setting, dict):
            raise CommandError("--setting must be a JSON object.")
        app = retrieval_app_create(name=name, kb_slugs=kb, published=not unpublished, rag_setting=rag_setting)
        self.stderr.write(f"Retrieval app {app.pk} over {', '.join(kb)}; bind a key with "
                          f"`manage.py apikey create --owner <user> --name <what for> --app {app.pk}`.")
        self.stdout.write(str(app.pk))

    def _list(self, **_):
        for app in RetrievalApp.objects.prefetch_related("knowledge_bases"):
            kbs = ",".join(kb.slug for kb in app.knowledge_bases.all())
            state = "published" if app.published else "unpublished"
            self.stdout.write(f"{app.pk}\t{state}\t{app.name}\t{kbs}\t{json.dumps(app.rag_setting)}")

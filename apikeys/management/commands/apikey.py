"""`manage.py apikey create|list|revoke|rotate`: manage MCP API keys from the shell (the admin does the same)."""

from __future__ import annotations

import datetime

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from apikeys.models import ApiKey
from apikeys.services import api_key_issue, api_key_revoke, api_key_rotate
from infra.errors import ServiceError
from rag.models import RetrievalApp


class Command(BaseCommand):
    help = "Create, list, revoke or rotate API keys for the MCP service. A new key is printed once."

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="action", required=True)
        create = commands.add_parser("create", help="Issue a key and print it (once)")
        create.add_argument("--owner", required=True, help="Username of the key's owner")
        create.add_argument("--name", required=True, help="What the key is for")
        create.add_argument("--daily-quota", type=int, default=None,
                            help="Calls per day; 0: unlimited (default: RAG_MCP_DEFAULT_DAILY_QUOTA)")
        create.add_argument("--rate-limit", type=int, default=None,
                            help="Calls per minute; 0: unlimited (default: RAG_MCP_DEFAULT_RATE_LIMIT)")
        create.add_argument("--expires-days", type=int, default=None, help="Expire after this many days")
        create.add_argument("--app", type=int, default=None,
                            help="Bind the key to this retrieval app (its id; see `manage.py retrievalapp list`)")
        commands.add_parser("list", help="List keys by prefix")
        for action in ("revoke", "rotate"):
            sub = commands.add_parser(action, help=f"{action.capitalize()} a key by its prefix")
            sub.add_argument("prefix")

    def handle(self, *args, action, **options):
        try:
            getattr(self, f"_{action}")(**options)
        except ServiceError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None

    def _create(self, *, owner, name, daily_quota, rate_limit, expires_days, app, **_):
        user = get_user_model().objects.filter(username=owner).first()
        if user is None:
            raise CommandError(f"No user named {owner!r}; create one with `manage.py createsuperuser`.")
        for label, value, minimum in (("--daily-quota", daily_quota, 0), ("--rate-limit", rate_limit, 0),
                                      ("--expires-days", expires_days, 1)):
            if value is not None and value < minimum:
                raise CommandError(f"{label} must be at least {minimum}.")
        expires_at = timezone.now() + datetime.timedelta(days=expires_days) if expires_days else None
        retrieval_app = None
        if app is not None:
            retrieval_app = RetrievalApp.objects.filter(pk=app).first()
            if retrieval_app is None:
                raise CommandError(f"No retrieval app {app}; create one with `manage.py retrievalapp create`.")
        record, key = api_key_issue(owner=user, name=name, expires_at=expires_at, daily_quota=daily_quota,
                                    rate_limit_per_minute=rate_limit, app=retrieval_app)
        self.stderr.write(f"Key {record.prefix} for {owner}. Copy it now; it is not stored and is not shown again:")
        self.stdout.write(key)

    def _list(self, **_):
        for key in ApiKey.objects.select_related("owner"):
            last = key.last_used_at.isoformat(timespec="seconds") if key.last_used_at else "never"
            app = f"app {key.app_id}" if key.app_id else "no app"
            self.stdout.write(f"{key.prefix}\t{key.state}\t{key.owner.username}\t{key.name}\t{app}\tlast used {last}")

    def _find(self, prefix: str) -> ApiKey:
        key = ApiKey.objects.filter(prefix=prefix.split("_", 1)[0]).first()
        if key is None:
            raise CommandError(f"No key with prefix {prefix!r}.")
        return key

    def _revoke(self, *, prefix, **_):
        key = api_key_revoke(key=self._find(prefix))
        self.stdout.write(f"{key.prefix} revoked")

    def _rotate(self, *, prefix, **_):
        new, key = api_key_rotate(key=self._find(prefix))
        self.stderr.write(f"{prefix} revoked; its replacement {new.prefix} is printed once:")
        self.stdout.write(key)

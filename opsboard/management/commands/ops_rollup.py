"""`manage.py ops_rollup [--hours N]`: roll up closed hours now (the beat job does it every 5 minutes)."""

from django.core.management.base import BaseCommand

from opsboard.services import rollup_hours


class Command(BaseCommand):
    help = "Store per-hour numbers of each channel for the closed hours of the last N hours (default 48)."

    def add_arguments(self, parser):
        parser.add_argument("--hours", type=int, default=48, help="how far back (e.g. 744 for 31 days)")

    def handle(self, *args, hours, **options):
        self.stdout.write(f"{rollup_hours(hours=max(1, hours))} hour rows written")

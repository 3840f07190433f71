"""`manage.py ops_report [--day YYYY-MM-DD]`: build a day's ops report (default yesterday), as the nightly job does."""

from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_date

from opsboard.services import daily_report_build


class Command(BaseCommand):
    help = "Build the daily ops report of a day (default: yesterday) and store it for the ops site."

    def add_arguments(self, parser):
        parser.add_argument("--day", default="", help="YYYY-MM-DD (local time zone)")

    def handle(self, *args, day, **options):
        parsed = parse_date(day) if day else None
        if day and parsed is None:
            raise CommandError("--day must be YYYY-MM-DD.")
        report = daily_report_build(parsed)
        totals = report.summary["channels"]
        self.stdout.write(f"report {report.day}: web {totals['web']['requests']} · mcp {totals['mcp']['requests']} · "
                          f"eval {totals['eval']['requests']} requests")

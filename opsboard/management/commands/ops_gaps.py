"""`manage.py ops_gaps`: group the unanswered questions into coverage gaps now (the beat job does it hourly)."""

from django.core.management.base import BaseCommand

from opsboard.gaps import gaps_compute


class Command(BaseCommand):
    help = "Group the unanswered user questions of the last 30 days into coverage gaps (the hourly beat job), " \
           "then re-check the groups marked covered against a newer index."

    def handle(self, *args, **options):
        run = gaps_compute()
        self.stdout.write(f"{run.questions} unanswered question(s) in {run.groups} group(s); "
                          f"{run.embedded_left} left to embed next run; {run.rechecked} covered group(s) re-checked, "
                          f"{run.closed} closed.")

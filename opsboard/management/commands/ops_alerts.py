"""`manage.py ops_alerts`: evaluate the alert rules once, as the every-minute job does, and list what fires."""

from django.core.management.base import BaseCommand

from opsboard.services import alerts_evaluate


class Command(BaseCommand):
    help = "Evaluate the ops alert rules now; print the alerts that are firing."

    def handle(self, *args, **options):
        firing = alerts_evaluate()
        for event in firing:
            self.stdout.write(f"FIRING {event.rule}: {event.message} (since {event.fired_at:%Y-%m-%d %H:%M})")
        if not firing:
            self.stdout.write("no alert is firing")

"""What the ops jobs write (the pages themselves only read): daily reports and alert events."""

from django.db import models


class DailyReport(models.Model):
    """The previous day's report, built by a scheduled job: the numbers as JSON and a self-contained page."""

    day = models.DateField(unique=True)
    generated_at = models.DateTimeField(auto_now=True)
    summary = models.JSONField(default=dict)
    html = models.TextField()

    class Meta:
        ordering = ["-day"]

    def __str__(self) -> str:
        return f"report {self.day}"


class AlertEvent(models.Model):
    """One firing of an alert rule, from the moment a threshold is crossed until it is back within it."""

    rule = models.CharField(max_length=64)
    message = models.CharField(max_length=300)
    value = models.FloatField(null=True, blank=True)
    threshold = models.FloatField(null=True, blank=True)
    fired_at = models.DateTimeField(auto_now_add=True, db_index=True)
    last_seen_at = models.DateTimeField(auto_now=True)
    resolved_at = models.DateTimeField(null=True, blank=True, db_index=True)
    delivered = models.BooleanField(default=False, help_text="Sent to the webhook")
    delivery_error = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-fired_at"]
        indexes = [models.Index(fields=["rule", "resolved_at"])]

    def __str__(self) -> str:
        return f"{self.rule} at {self.fired_at:%Y-%m-%d %H:%M}"


class HourStat(models.Model):
    """One channel's numbers for one closed hour, rolled up by a job so the overview reads a few hundred rows
    instead of a million. Thumbs-down are not kept here: they arrive after the hour and are counted live."""

    hour = models.DateTimeField(help_text="Start of the hour (aware)")
    channel = models.CharField(max_length=16)
    requests = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    empty = models.PositiveIntegerField(default=0)
    low = models.PositiveIntegerField(default=0)
    degraded = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    latency = models.JSONField(default=dict, help_text="Latency histogram: requests per log bucket "
                                                       "(selectors.LATENCY_BUCKET), {bucket: count}")
    latency_min_ms = models.FloatField(null=True, blank=True, help_text="The fastest request of the hour")
    latency_max_ms = models.FloatField(null=True, blank=True, help_text="The slowest request of the hour")
    rolled_up_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["hour", "channel"]
        constraints = [models.UniqueConstraint(fields=["hour", "channel"], name="hour_stat_unique")]

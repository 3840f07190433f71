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


class GapGroup(models.Model):
    """A documentation gap: questions that went unanswered (empty, low confidence, thumbs-down), grouped by
    meaning by the gaps job (opsboard.gaps). A group keeps its number, status and notes across recomputes."""

    class Status(models.TextChoices):
        OPEN = "open", "open"
        COVERED = "covered", "marked covered, waiting for a new index"
        CLOSED = "closed", "closed: a later index answers it"

    class Reason(models.TextChoices):
        NO_PAGE = "no_page", "no page covers it"
        MISSED = "missed", "a page exists but retrieval missed it"
        OUT_OF_CATALOG = "out_of_catalog", "names an API the docs do not have"
        VERSION_NOT_INDEXED = "version_not_indexed", "asks about an SDK version that is not indexed"

    kb = models.CharField(max_length=64, blank=True, help_text="The knowledge base most of its questions asked")
    title = models.TextField(help_text="Its most asked question")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.OPEN, db_index=True)
    reason = models.CharField(max_length=24, choices=Reason.choices, default=Reason.NO_PAGE)
    reason_detail = models.CharField(max_length=300, blank=True)
    questions = models.PositiveIntegerField(default=0, help_text="Distinct questions")
    size = models.PositiveIntegerField(default=0, help_text="Unanswered requests over the job's window")
    daily = models.JSONField(default=dict, help_text="Unanswered requests per local day, {YYYY-MM-DD: count}")
    first_seen = models.DateTimeField(null=True)
    last_seen = models.DateTimeField(null=True, db_index=True)
    examples = models.JSONField(default=list, help_text="[{question, times, request_id, channel}], most asked first")
    classes = models.JSONField(default=list, help_text="[[class, requests]]: what the engine reached for")
    pages = models.JSONField(default=list, help_text="[[source, requests]]")
    computed_at = models.DateTimeField(null=True)
    covered_at = models.DateTimeField(null=True, blank=True)
    covered_by = models.CharField(max_length=150, blank=True)
    covered_version = models.CharField(max_length=64, blank=True, help_text="The active index when marked")
    checked_version = models.CharField(max_length=64, blank=True)
    check_result = models.JSONField(default=dict, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-size", "id"]

    def __str__(self) -> str:
        return f"gap {self.pk}: {self.title[:60]}"


class GapQuestion(models.Model):
    """One unanswered question (its wordings that differ only in case, spacing or end punctuation are one),
    with its vector kept so a recompute embeds only new questions."""

    key = models.CharField(max_length=255, help_text="opsboard.grouping.question_key, cut")
    kb = models.CharField(max_length=64, blank=True)
    question = models.TextField(help_text="Its most asked wording")
    group = models.ForeignKey(GapGroup, null=True, blank=True, on_delete=models.SET_NULL, related_name="members")
    times = models.PositiveIntegerField(default=0)
    daily = models.JSONField(default=dict, help_text="Unanswered requests per local day, {YYYY-MM-DD: count}")
    first_seen = models.DateTimeField(null=True)
    last_seen = models.DateTimeField(null=True, db_index=True)
    request_id = models.CharField(max_length=64, blank=True, help_text="Its latest user request")
    channel = models.CharField(max_length=16, blank=True)
    reason = models.CharField(max_length=24, blank=True)
    classes = models.JSONField(default=list, help_text="Classes the engine reached for, best first")
    pages = models.JSONField(default=list)
    vector = models.BinaryField(help_text="float32 question vector of `model`")
    model = models.CharField(max_length=128, blank=True)
    settled_at = models.DateTimeField(null=True, blank=True, help_text="Its group closed: earlier requests no "
                                                                       "longer count")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kb", "key"], name="gap_question_unique")]

    def __str__(self) -> str:
        return self.question[:80]

"""Golden sets (versioned), evaluation runs with per-question results, cached judge verdicts, and drafts of
golden items made from thumbs-down answers."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class GoldenSet(models.Model):
    """One version of a golden set. Items of a version that a run used never change: editing makes a new version."""

    class Kind(models.TextChoices):
        RETRIEVAL = "retrieval"
        GENERATION = "generation"

    name = models.CharField(max_length=100)
    version = models.PositiveIntegerField(default=1)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    note = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    class Meta:
        ordering = ["name", "-version"]
        constraints = [models.UniqueConstraint(fields=["name", "version"], name="golden_set_unique_version")]

    def __str__(self) -> str:
        return f"{self.name} v{self.version} ({self.kind})"

    @property
    def frozen(self) -> bool:
        """A version some run used is frozen: its results must stay explainable by its items."""
        return self.runs.exists()


class GoldenItem(models.Model):
    """One golden question, in the fields of ../shared/golden/SCHEMA.md (both kinds share one table)."""

    golden_set = models.ForeignKey(GoldenSet, on_delete=models.CASCADE, related_name="items")
    item_id = models.CharField(max_length=64)
    position = models.PositiveIntegerField(default=0)
    question = models.TextField()
    layer = models.CharField(max_length=16, blank=True, help_text="plain, colloquial, member, typo, multi, negative")
    answerable = models.BooleanField(default=True)
    expected_classes = models.JSONField(default=list, blank=True)
    expected_members = models.JSONField(default=list, blank=True)
    negative_kind = models.CharField(max_length=16, blank=True, help_text="chitchat, out_of_catalog, no_answer")
    kb = models.CharField(max_length=64)
    source = models.CharField(max_length=300, blank=True)
    must_mention = models.JSONField(default=list, blank=True)
    forbidden = models.JSONField(default=list, blank=True)
    reference = models.TextField(blank=True)
    needs_code = models.BooleanField(default=False)

    class Meta:
        ordering = ["golden_set", "position", "id"]
        constraints = [models.UniqueConstraint(fields=["golden_set", "item_id"], name="golden_item_unique_id")]

    def __str__(self) -> str:
        return f"{self.item_id}: {self.question[:60]}"


class EvalRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        CANCELLED = "cancelled"

    golden_set = models.ForeignKey(GoldenSet, on_delete=models.PROTECT, related_name="runs")
    kb = models.CharField(max_length=64, blank=True, help_text="Only this knowledge base's items; empty: all")
    index_versions = models.JSONField(default=dict, blank=True, help_text="kb -> index version evaluated")
    sdk_version = models.CharField(max_length=32, blank=True,
                                   help_text="The SDK version asked (issue 32); empty: each knowledge base's latest")
    candidate = models.BooleanField(default=False, help_text="Evaluated a version that is not active (a gate)")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    verdict = models.CharField(max_length=16, blank=True, help_text="pass, fail or not_scored")
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    current_question = models.CharField(max_length=300, blank=True)
    cancel_requested = models.BooleanField(default=False)
    metrics = models.JSONField(default=dict, blank=True)
    counts = models.JSONField(default=dict, blank=True)
    gates = models.JSONField(default=list, blank=True)
    layers = models.JSONField(default=list, blank=True)
    baseline = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    baseline_diff = models.JSONField(default=dict, blank=True)
    judge = models.JSONField(default=dict, blank=True, help_text="model, prompt_version, repeats; empty: no judge")
    error = models.TextField(blank=True)
    commit = models.CharField(max_length=40, blank=True)
    report_path = models.CharField(max_length=500, blank=True)
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"run #{self.pk} {self.golden_set} {self.status} {self.verdict}"

    @property
    def stalled(self) -> bool:
        """Running, but its worker has not beaten for RAG_EVAL_STALE_SECONDS: the next reap (Celery beat, or the
        next run's start) marks it failed. Pages show it; they never write."""
        from django.utils import timezone

        return (self.status == self.Status.RUNNING and self.heartbeat_at is not None
                and (timezone.now() - self.heartbeat_at).total_seconds() > settings.RAG_EVAL_STALE_SECONDS)


class EvalResult(models.Model):
    """One question of one run. Unique per (run, item): running a question again replaces its row."""

    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="results")
    item = models.ForeignKey(GoldenItem, on_delete=models.PROTECT, related_name="+")
    position = models.PositiveIntegerField(default=0)
    passed = models.BooleanField(default=False)
    attribution = models.CharField(max_length=32, blank=True)
    attribution_detail = models.CharField(max_length=300, blank=True)
    scores = models.JSONField(default=dict, blank=True, help_text="the rule scores of this question")
    detail = models.JSONField(default=dict, blank=True, help_text="plan, retrieved, excluded, answer, citations, judge")
    request_id = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["run", "position"]
        constraints = [models.UniqueConstraint(fields=["run", "item"], name="eval_result_unique_item")]


class JudgeVerdict(models.Model):
    """A judge model's verdict, cached by (judge model, prompt version, question, answer, evidence, repeat)."""

    key = models.CharField(max_length=64, unique=True)
    model = models.CharField(max_length=200)
    prompt_version = models.CharField(max_length=32)
    verdict = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)


class GoldenDraft(models.Model):
    """A thumbs-down answer turned into a draft golden item, for QA to complete and add to a set."""

    class Status(models.TextChoices):
        OPEN = "open"
        ADDED = "added"
        DISMISSED = "dismissed"

    request_id = models.CharField(max_length=64, unique=True)
    channel = models.CharField(max_length=16)
    kb = models.CharField(max_length=64)
    question = models.TextField()
    answer = models.TextField(blank=True)
    evidence = models.JSONField(default=list, blank=True, help_text="chunks the answer was given")
    feedback_reason = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    # Completed by QA before adding:
    target_set = models.ForeignKey(GoldenSet, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                   help_text="The set whose next version gets this item")
    layer = models.CharField(max_length=16, blank=True, default="plain")
    answerable = models.BooleanField(default=True)
    expected_classes = models.JSONField(default=list, blank=True)
    expected_members = models.JSONField(default=list, blank=True)
    negative_kind = models.CharField(max_length=16, blank=True)
    must_mention = models.JSONField(default=list, blank=True)
    forbidden = models.JSONField(default=list, blank=True)
    reference = models.TextField(blank=True)
    needs_code = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    added_item = models.ForeignKey(GoldenItem, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"draft from {self.request_id}: {self.question[:60]}"

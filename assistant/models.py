"""The web channel's daily token pool and the feedback users leave on answers."""

from django.db import models


class TokenPool(models.Model):
    """Tokens the web page may spend on one day (in the configured time zone)."""

    channel = models.CharField(max_length=16, default="web")
    day = models.DateField()
    limit = models.PositiveBigIntegerField()
    spent = models.BigIntegerField(default=0, help_text="Settled usage plus reservations of answers in flight")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-day"]
        constraints = [models.UniqueConstraint(fields=["channel", "day"], name="token_pool_unique_day")]

    def __str__(self) -> str:
        return f"{self.channel} {self.day}: {self.spent}/{self.limit}"

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.spent)


class Feedback(models.Model):
    """A thumbs-down on one answer, with an optional reason; one per answer."""

    request = models.OneToOneField("rag.RequestRecord", on_delete=models.CASCADE, related_name="feedback")
    reason = models.TextField(blank=True, max_length=2000)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "feedback"  # a mass noun: "feedbacks" is not English

    def __str__(self) -> str:
        return f"thumbs-down on {self.request_id}"

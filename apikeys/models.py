"""API keys for the MCP service: stored hashed, shown once, looked up by their public prefix."""

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiKey(models.Model):
    prefix = models.CharField(max_length=16, unique=True, help_text="Public part, shown in lists and logs")
    secret_hash = models.CharField(max_length=64, help_text="SHA-256 of the whole key; the key itself is never stored")
    name = models.CharField(max_length=100, help_text="What the key is for, e.g. 'Cursor on Li Wei's laptop'")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="api_keys")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    daily_quota = models.PositiveIntegerField(null=True, blank=True, help_text="Calls per day; empty: unlimited")
    rate_limit_per_minute = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: unlimited")

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"

    @property
    def state(self) -> str:
        if self.revoked_at:
            return "revoked"
        if self.expires_at and self.expires_at <= timezone.now():
            return "expired"
        return "active"

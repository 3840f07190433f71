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
    # Empty in a form: the deployment's default (RAG_MCP_DEFAULT_*), filled in when the key is saved; 0: unlimited.
    daily_quota = models.PositiveIntegerField(null=True, blank=True,
                                              help_text="Calls per day; 0: unlimited; empty: the default")
    rate_limit_per_minute = models.PositiveIntegerField(null=True, blank=True,
                                                        help_text="Calls per minute; 0: unlimited; empty: the default")
    app = models.ForeignKey("rag.RetrievalApp", null=True, blank=True, on_delete=models.SET_NULL, related_name="api_keys",
                            help_text="The retrieval app this key may call the open retrieval API for; empty: none")

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


class ApiKeyUsage(models.Model):
    """Calls and tokens of one key, one tool, one local day. Calls are counted when a call is admitted
    (so a daily quota is enforced on them); tokens and failures when it finishes."""

    key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="usage")
    day = models.DateField()
    tool = models.CharField(max_length=64)
    calls = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-day", "tool"]
        verbose_name = "API key usage"
        verbose_name_plural = "API key usage"
        constraints = [models.UniqueConstraint(fields=["key", "day", "tool"], name="api_key_usage_unique_day_tool")]

    def __str__(self) -> str:
        return f"{self.key.prefix} {self.day} {self.tool}: {self.calls}"

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

"""What the web assistant's faces accept (POST /api/search, /api/chat, /api/feedback and the WebSocket /ws/chat):
the JSON shapes, strictly typed, with their limits documented in the OpenAPI schema; the values themselves are
checked by the question service, the same for every face."""

from __future__ import annotations

from django.core.validators import (
    MaxLengthValidator,
    MaxValueValidator,
    MinLengthValidator,
    MinValueValidator,
    ProhibitNullCharactersValidator,
    RegexValidator,
)
from rest_framework import serializers
from rest_framework.fields import empty

from rag.services import LIMITS
from rag.services.records import QUESTION_REGEX

LIMIT_VALIDATORS = (MaxLengthValidator, MinLengthValidator, MaxValueValidator, MinValueValidator,
                    ProhibitNullCharactersValidator, RegexValidator)
# Shows at least one character (not only white space, control or format characters), no NUL: the question
# service's rule, as a pattern.
QUESTION_PATTERN = RegexValidator(QUESTION_REGEX)
KB_PATTERN = RegexValidator(r"^[-a-z0-9_]+$")  # a slug (slugify keeps these characters); the version goes apart
SDK_VERSION_PATTERN = RegexValidator(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")  # rag.engine.sdk.VERSION_RE
NO_NUL = RegexValidator(r"^[^\u0000]*$")  # the service refuses a NUL in any value (its code names the field)


class LimitsInSchemaOnly:
    """A field that documents its limits in the OpenAPI schema but leaves checking them to the question
    service, which checks every face's questions the same way (and records the failures): here, types only."""

    def run_validators(self, value):
        documented = self.validators
        self.validators = [v for v in documented if not isinstance(v, LIMIT_VALIDATORS)]
        try:
            super().run_validators(value)
        finally:
            self.validators = documented


class StrictCharField(LimitsInSchemaOnly, serializers.CharField):
    """A string, and only a string: numbers or lists are a type error, not silently converted.

    A blank string is a limit too (`minLength` in the schema when `allow_blank` is false): it passes as ""
    for the service to refuse with its own code.
    """

    def run_validation(self, data=empty):
        if isinstance(data, str) and not data.strip():
            return ""
        return super().run_validation(data)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(LimitsInSchemaOnly, serializers.IntegerField):
    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return data


class ListField(LimitsInSchemaOnly, serializers.ListField):
    pass


class AskInput(serializers.Serializer):
    """The shape of a question (JSON types); its values are checked by the question service."""

    question = StrictCharField(
        min_length=1, max_length=LIMITS.question_chars, validators=[QUESTION_PATTERN],
        help_text="The question: it must show at least one character (not only white space, control or format "
                  "characters such as zero-width spaces) and hold no NUL character (else 400 `invalid_question`); over "
                  f"{LIMITS.question_chars} characters is 400 `question_too_long`.")
    kb = StrictCharField(min_length=1, max_length=LIMITS.kb_chars, validators=[KB_PATTERN], required=False,
                         help_text="Knowledge base slug (default: the site's default knowledge base).")
    sdk_version = StrictCharField(min_length=1, max_length=32, required=False, validators=[SDK_VERSION_PATTERN],
                                  help_text="The SDK version to read (`2.0`, `latest`, an alias) when the knowledge "
                                            "base holds several; default `latest`. One that is not indexed is 404 "
                                            "`sdk_version_not_found` with the indexed ones in `details.versions`.")
    exclude = ListField(child=StrictCharField(min_length=1, max_length=LIMITS.chunk_id_chars, validators=[NO_NUL]),
                        required=False,
                        max_length=LIMITS.exclude, help_text="chunk ids not to use")


class SearchInput(AskInput):
    top_k = StrictIntegerField(min_value=1, max_value=LIMITS.top_k, required=False,
                               help_text="How many chunks to return (default 5).")


class FeedbackInput(serializers.Serializer):
    request_id = StrictCharField(max_length=64, help_text="The `request_id` of an answer of /api/chat.")
    reason = StrictCharField(max_length=2000, required=False, allow_blank=True)

"""The admin names every model in good English: a plural is not the singular with an "s" glued on."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db

# Plurals English forms otherwise than by adding "s", and mass nouns that take none.
SPECIAL = {"class alias": "class aliases", "feedback": "feedback", "API key usage": "API key usage"}


def expected_plural(singular: str) -> str:
    if singular in SPECIAL:
        return SPECIAL[singular]
    if singular.endswith(("s", "x", "z", "ch", "sh")):
        return singular + "es"
    if singular.endswith("y") and singular[-2:-1] not in "aeiou":
        return singular[:-1] + "ies"
    return singular + "s"


def test_every_model_in_the_admin_has_an_english_plural():
    names = {str(model._meta.verbose_name): str(model._meta.verbose_name_plural) for model in admin.site._registry}

    assert {singular: plural for singular, plural in names.items() if plural != expected_plural(singular)} == {}
    assert names["class alias"] == "class aliases" and names["feedback"] == "feedback"


def test_the_admin_index_says_class_aliases(client):
    client.force_login(get_user_model().objects.create_superuser("root", password="pw"))

    page = client.get("/admin/").content.decode()

    assert "Class aliases" in page and "Class aliass" not in page and "Feedbacks" not in page

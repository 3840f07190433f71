"""Issue 32 on the retrieval APIs: a knowledge base id names an SDK version (`fx@2.0`, an alias), the SDK itself
is searched in its latest version, and an app over the SDK may search every version of it."""

from __future__ import annotations

import pytest

from infra.errors import ServiceError
from rag.services.retrieval import knowledge_bases_of, retrieval_app_create
from rag.tests.sdk_fixture import build_sdk

pytestmark = pytest.mark.django_db


@pytest.fixture
def sdk(tmp_path):
    return build_sdk(tmp_path)


def test_an_id_names_a_version_an_alias_or_the_sdks_latest(sdk):
    assert [kb.slug for kb in knowledge_bases_of(["fx", "fx@1.4", "fx@latest"], None)] == ["fx@2.1", "fx@1.4"]


def test_an_app_over_an_sdk_searches_its_versions_and_nothing_else(sdk, tmp_path):
    app = retrieval_app_create(name="fx docs", kb_slugs=["fx"])
    assert [kb.slug for kb in knowledge_bases_of(["fx@2.0"], app)] == ["fx@2.0"]
    with pytest.raises(ServiceError) as raised:
        knowledge_bases_of(["fx@9"], app)
    assert raised.value.code == "sdk_version_not_found"

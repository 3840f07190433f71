"""One index for several machines through S3-compatible object storage (slow): a `rag reindex` process builds
into moto's S3 server, two Daphne processes (each with a data folder of its own, as on two machines) search it,
and a second build's activation reaches both without a restart."""

from __future__ import annotations

import time

import pytest
import requests

from rag.models import KnowledgeBase
from rag.tests.conftest import make_kb
from rag.tests.live import daphne, manage, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NEW_PAGE = """# Lantern

A lantern lights the scene around a point.

## Properties

### .glowRadius : Number

How far the lantern's glow reaches, in metres. Default is 7.5.
"""


def search(url: str, question: str) -> dict | None:
    try:
        response = requests.post(url + "/api/search", json={"question": question, "top_k": 3}, timeout=20)
    except requests.RequestException:
        return None
    return response.json() if response.status_code == 200 else None


def test_a_build_in_one_process_is_served_by_two_others_and_a_new_activation_reaches_both(
        s3_server, corpus_copy, tmp_path):
    bucket = s3_server.bucket()
    shared = {**s3_server.env(), "RAG_LANCEDB_URI": f"s3://{bucket}/rag/lancedb", "RAG_WARM_UP": "false"}
    make_kb(corpus_copy)

    def reindex() -> str:
        built = manage("rag", "reindex", "--kb", "sdk", RAG_DATA_DIR=str(tmp_path / "builder"), **shared)
        assert built.returncode == 0, built.stdout + built.stderr
        return KnowledgeBase.objects.select_related("active_version").get(slug="sdk").active_version.name

    first = reindex()
    machines = [tmp_path / "web-a", tmp_path / "web-b"]
    with daphne(RAG_DATA_DIR=str(machines[0]), **shared) as one, daphne(RAG_DATA_DIR=str(machines[1]), **shared) as two:
        for url, data in zip((one, two), machines):
            found = wait_for(lambda: search(url, "Fog 的 near 默认值是多少？"), 60, "a search")  # noqa: B023
            assert found["version"] == first and found["results"]
            assert (data / "index" / "sdk" / first / "manifest.json").exists()  # its own copy, from the bucket

        (corpus_copy / "Lantern.md").write_text(NEW_PAGE, encoding="utf-8")
        second = reindex()
        activated = time.monotonic()
        assert second != first

        for url in (one, two):
            found = wait_for(lambda: (r := search(url, "Lantern glowRadius")) and r["version"] == second and r,  # noqa: B023
                             10, "the new version")
            assert found["results"][0]["class_name"] == "Lantern"
        seen_after = time.monotonic() - activated
        ready = [requests.get(url + "/readyz", timeout=10).json() for url in (one, two)]
    assert seen_after < 5, f"the new version was served {seen_after:.1f} s after its activation"
    assert all(r["checks"]["index:sdk"] == "ok" for r in ready)
    for data in machines:
        assert (data / "index" / "sdk" / second / "manifest.json").exists()

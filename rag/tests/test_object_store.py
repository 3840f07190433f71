"""One index on S3-compatible object storage (X4), against moto's S3 server: LanceDB's tables and the version
folders in one bucket, each machine opening versions from its own copy, fetched once."""

from __future__ import annotations

import json

import pytest

from rag.engine.index import MANIFEST, IndexError_, IndexStore, VersionReader
from rag.engine.objects import RemoteFolders, S3Options, sibling_uri
from rag.pipeline import Engine, make_store


def remote_store(s3_server, bucket: str, folder) -> IndexStore:
    """An index store of one machine: the shared bucket, and a local folder of its own."""
    options = s3_server.options
    return IndexStore(lancedb_uri=f"s3://{bucket}/rag/lancedb", index_dir=folder / "index",
                      remote=RemoteFolders(f"s3://{bucket}/rag/index", options), storage_options=options.lancedb())


@pytest.fixture
def bucket(s3_server):
    return s3_server.bucket()


@pytest.fixture(scope="module")
def known_vectors(built_index):
    """The fixture chunks' vectors, embedded once per session: builds here take them as a shipped pack."""
    reader = VersionReader.open(built_index.store, built_index.kb, built_index.version)
    return {chunk.text_hash: vector for chunk, vector in zip(reader.chunks, reader.vectors)}


@pytest.fixture
def published(s3_server, bucket, tmp_path, fixture_chunks, real_embedder, known_vectors):
    """The fixture corpus built on a builder machine into the bucket."""
    builder = remote_store(s3_server, bucket, tmp_path / "builder")
    report = builder.build("sdk", "v1", fixture_chunks, real_embedder, prebuilt=known_vectors)
    return builder, report


def test_a_build_publishes_the_version_folder_with_the_manifest_last(s3_server, bucket, published):
    builder, report = published
    remote = builder.remote
    manifest = json.loads(remote.read(f"sdk/v1/{MANIFEST}"))
    assert manifest["chunk_count"] == report.chunk_count and "publish" in report.timings_s
    local = sorted(p.relative_to(builder.version_dir("sdk", "v1")).as_posix()
                   for p in builder.version_dir("sdk", "v1").rglob("*") if p.is_file())
    for name in local:
        assert remote.read(f"sdk/v1/{name}") == (builder.version_dir("sdk", "v1") / name).read_bytes()
    assert "sdk__v1" in builder.connect().list_tables().tables  # LanceDB's table in the same bucket


def test_another_machine_opens_the_published_version_from_its_own_copy(s3_server, bucket, published, tmp_path,
                                                                       fixture_chunks, real_embedder):
    other = remote_store(s3_server, bucket, tmp_path / "web")
    assert other.exists("sdk", "v1") and not other.version_dir("sdk", "v1").exists()

    reader = VersionReader.open(other, "sdk", "v1")

    assert reader.chunks == fixture_chunks and (other.version_dir("sdk", "v1") / MANIFEST).exists()
    ids, _ = reader.dense_search(real_embedder.embed_query(fixture_chunks[3].text), 3)
    assert 3 in ids
    # Fetched once: a second open reads the local copy (the bucket is asked only for the manifest).
    other.remote.download = lambda *args, **kwargs: pytest.fail("fetched twice")
    assert VersionReader.open(other, "sdk", "v1").count == len(fixture_chunks)


def test_a_copy_that_differs_from_the_published_version_is_fetched_again(s3_server, bucket, published, tmp_path):
    other = remote_store(s3_server, bucket, tmp_path / "web")
    VersionReader.open(other, "sdk", "v1")
    folder = other.version_dir("sdk", "v1")
    (folder / "catalog.json").write_text("{broken", encoding="utf-8")
    (folder / MANIFEST).write_text(json.dumps({"stale": True}), encoding="utf-8")

    reader = VersionReader.open(other, "sdk", "v1")

    assert reader.catalog.classes and json.loads((folder / MANIFEST).read_text())["version"] == "v1"
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no staging folder left


def test_an_unpublished_or_unreachable_version_does_not_open(s3_server, bucket, tmp_path):
    store = remote_store(s3_server, bucket, tmp_path / "web")
    with pytest.raises(IndexError_, match="missing or unfinished"):
        VersionReader.open(store, "sdk", "v9")
    unreachable = IndexStore(lancedb_uri=str(tmp_path / "lancedb"), index_dir=tmp_path / "index",
                             remote=RemoteFolders(f"s3://{bucket}/index", S3Options(
                                 endpoint="http://127.0.0.1:9", region="us-east-1", access_key="a", secret_key="b")))
    with pytest.raises(IndexError_, match="cannot read version v1"):
        VersionReader.open(unreachable, "sdk", "v1")


def test_deleting_a_version_removes_it_from_the_bucket_and_copies_elsewhere_go_on_the_next_fetch(
        s3_server, bucket, published, tmp_path, fixture_chunks, real_embedder, known_vectors):
    builder, _ = published
    web = remote_store(s3_server, bucket, tmp_path / "web")
    VersionReader.open(web, "sdk", "v1")
    builder.build("sdk", "v2", fixture_chunks[:20], real_embedder, prebuilt=known_vectors)

    builder.delete("sdk", "v1")

    assert builder.remote.read(f"sdk/v1/{MANIFEST}") is None and not builder.exists("sdk", "v1")
    assert "sdk__v1" not in builder.connect().list_tables().tables
    assert VersionReader.open(web, "sdk", "v2").count == 20
    assert not web.version_dir("sdk", "v1").exists() and web.version_dir("sdk", "v2").exists()


def test_a_failed_publish_leaves_no_version(s3_server, bucket, tmp_path, fixture_chunks, real_embedder,
                                            known_vectors):
    store = remote_store(s3_server, bucket, tmp_path / "builder")

    def broken(key, data):
        if key.endswith(MANIFEST):
            raise OSError("the bucket went away")
        RemoteFolders.write(store.remote, key, data)

    store.remote.write = broken
    with pytest.raises(OSError, match="went away"):
        store.build("sdk", "v1", fixture_chunks[:10], real_embedder, prebuilt=known_vectors)
    del store.remote.write
    assert not store.exists("sdk", "v1") and not store.version_dir("sdk", "v1").exists()
    assert "sdk__v1" not in store.connect().list_tables().tables


def test_the_embedding_cache_lives_in_the_bucket_too(s3_server, bucket, published, tmp_path, fixture_chunks,
                                                    counting_embedder):
    other = remote_store(s3_server, bucket, tmp_path / "second-builder")
    report = other.build("sdk", "v2", fixture_chunks, counting_embedder)
    assert report.embedded == 0 and counting_embedder.passage_calls == []


def test_settings_put_the_version_folders_beside_an_s3_lancedb(settings, s3_server, tmp_path):
    settings.RAG_ENGINE = {**settings.RAG_ENGINE, "LANCEDB_URI": "s3://docs-bucket/prod/lancedb", "INDEX_URI": "",
                           "INDEX_DIR": str(tmp_path / "copies"),
                           "S3": {"endpoint": "http://minio:9000", "region": "eu-west-1", "access_key": "id",
                                  "secret_key": "secret", "session_token": ""}}
    store = make_store()
    assert store.remote.uri == "s3://docs-bucket/prod/index" and store.index_dir == tmp_path / "copies"
    assert store.storage_options == {"region": "eu-west-1", "aws_endpoint": "http://minio:9000",
                                     "aws_access_key_id": "id", "aws_secret_access_key": "secret",
                                     "allow_http": "true"}
    assert sibling_uri("s3://bucket", "index") == "s3://bucket/index"
    settings.RAG_ENGINE = {**settings.RAG_ENGINE, "LANCEDB_URI": str(tmp_path / "lancedb")}
    assert make_store().remote is None and make_store().storage_options == {}


def test_a_new_active_version_drops_the_reader_of_the_one_before():
    engine = Engine(store=None, embedder=None, queries=None, readers={("sdk", "v1"): "r1", ("sdk", "v0"): "r0",
                                                                      ("other", "v1"): "o1"}, generator=None)
    engine.note_active("sdk", "v1")
    engine.note_active("sdk", "v1")
    assert set(engine.readers) == {("sdk", "v1"), ("sdk", "v0"), ("other", "v1")}

    engine.note_active("sdk", "v2")

    assert set(engine.readers) == {("sdk", "v0"), ("other", "v1")}  # v0 was named, not active: the LRU bounds it

"""Version folders on S3-compatible object storage (X4): one index for every process and machine.

LanceDB reaches the bucket itself (`s3://…` URIs with `storage_options`); the files of a version folder (BM25,
catalog, in-memory chunks and vectors, manifest) are copied there by `RemoteFolders` after a build, the manifest
last, so a reader that finds a manifest finds a whole version. Each machine opens a version from its own copy
(`IndexStore.index_dir`), fetched once: a published version never changes. pyarrow's S3 filesystem does the
copying (pyarrow is already here for LanceDB); any S3-compatible server works (AWS, MinIO, Ceph, R2, moto).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

REMOTE_SCHEMES = ("s3",)


def is_remote(uri: str) -> bool:
    return urlsplit(uri).scheme in REMOTE_SCHEMES


def sibling_uri(uri: str, name: str) -> str:
    """`s3://bucket/a/lancedb` -> `s3://bucket/a/<name>`; `s3://bucket` -> `s3://bucket/<name>`."""
    parts = urlsplit(uri)
    parent = parts.path.strip("/").rpartition("/")[0]
    return f"{parts.scheme}://{parts.netloc}/{parent + '/' if parent else ''}{name}"


@dataclass(frozen=True)
class S3Options:
    """Where and as whom to reach the bucket. Empty values leave it to the libraries' own defaults (the AWS
    credential chain: environment, profile, instance role)."""

    endpoint: str = ""  # http://host:port of MinIO, Ceph, moto …; "": AWS itself
    region: str = ""
    access_key: str = ""
    secret_key: str = ""
    session_token: str = ""

    def lancedb(self) -> dict[str, str]:
        """LanceDB's `storage_options` (the object_store crate's names)."""
        options = {"region": self.region, "aws_endpoint": self.endpoint, "aws_access_key_id": self.access_key,
                   "aws_secret_access_key": self.secret_key, "aws_session_token": self.session_token}
        if self.endpoint.startswith("http://"):
            options["allow_http"] = "true"
        return {name: value for name, value in options.items() if value}

    def filesystem(self):
        from pyarrow import fs

        arguments: dict = {"region": self.region or None, "connect_timeout": 5, "request_timeout": 30}
        if self.endpoint:
            endpoint = urlsplit(self.endpoint)
            arguments.update(endpoint_override=endpoint.netloc or endpoint.path, scheme=endpoint.scheme or "https")
        if self.access_key:
            arguments.update(access_key=self.access_key, secret_key=self.secret_key,
                             session_token=self.session_token or None)
        return fs.S3FileSystem(**{k: v for k, v in arguments.items() if v is not None})


class RemoteFolders:
    """Version folders under one `s3://bucket/prefix`: publish a local folder, fetch one, delete one."""

    def __init__(self, uri: str, options: S3Options):
        parts = urlsplit(uri)
        if parts.scheme not in REMOTE_SCHEMES or not parts.netloc:
            raise ValueError(f"not an object storage URI: {uri!r} (expected s3://bucket/prefix)")
        self.uri = uri.rstrip("/")
        self.root = f"{parts.netloc}/{parts.path.strip('/')}".rstrip("/")
        self.options = options
        self._fs = None

    @property
    def fs(self):
        if self._fs is None:
            self._fs = self.options.filesystem()
        return self._fs

    def _path(self, key: str) -> str:
        return f"{self.root}/{key.strip('/')}"

    def read(self, key: str) -> bytes | None:
        """A file's bytes, or None when there is no such file."""
        try:
            with self.fs.open_input_stream(self._path(key)) as stream:
                return stream.read()
        except FileNotFoundError:
            return None

    def publish(self, folder: Path, key: str, *, last: tuple[str, bytes]) -> None:
        """Upload every file under `folder` to `key/…`, then `last` (a name and its bytes) after all of them."""
        for path in sorted(path for path in folder.rglob("*") if path.is_file()):
            self.write(f"{key}/{path.relative_to(folder).as_posix()}", path.read_bytes())
        self.write(f"{key}/{last[0]}", last[1])

    def write(self, key: str, data: bytes) -> None:
        with self.fs.open_output_stream(self._path(key)) as out:
            out.write(data)

    def download(self, key: str, folder: Path, *, skip: str) -> None:
        """Copy every file under `key/` into `folder` (keeping its modification time), except the one named `skip`."""
        from pyarrow import fs

        prefix = self._path(key)
        for info in self.fs.get_file_info(fs.FileSelector(prefix, recursive=True)):
            if info.type != fs.FileType.File:
                continue
            relative = info.path[len(prefix) + 1:]
            if relative == skip:
                continue
            target = folder / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            with self.fs.open_input_stream(info.path) as stream:
                target.write_bytes(stream.read())
            if info.mtime is not None:
                stamp = info.mtime.timestamp()
                os.utime(target, (stamp, stamp))

    def delete(self, key: str) -> None:
        """Remove everything under `key/`; nothing there is fine."""
        from pyarrow import fs

        prefix = self._path(key)
        infos = self.fs.get_file_info(fs.FileSelector(prefix, recursive=True, allow_not_found=True))
        for info in sorted(infos, key=lambda i: i.type == fs.FileType.Directory):  # files first
            if info.type == fs.FileType.File:
                self.fs.delete_file(info.path)
        try:
            self.fs.delete_dir(prefix)
        except (FileNotFoundError, OSError):
            pass

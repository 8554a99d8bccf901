"""The output stores: a local folder (the default, ``<state-dir>``) and an S3-compatible bucket
(``--output-store s3://BUCKET/PREFIX``: AWS S3, MinIO, Ceph, R2...; ``pip install
'omni-core[s3]'``), so that any replica serves the content of any finished job.

Keys are ``<folder>/<name>`` with a fixed set of folders and plain names: a key never reaches
outside its store.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from omni_core.contract.errors import ConfigError
from omni_core.serving.stores.base import OutputStore, StoredObject

#: The folders of an output store: finished videos, the input images of video jobs, the images
#: answered with ``response_format=url``.
FOLDERS = ("videos", "inputs", "images")
_KEY = re.compile(r"^(videos|inputs|images)/[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}$")


def check_key(key: str) -> str:
    if not _KEY.match(key):
        raise ValueError(f"not an output-store key: {key!r}")
    return key


class LocalOutputStore(OutputStore):
    """Files under one folder (``videos/``, ``inputs/``, ``images/``; all ``0700``)."""

    scheme = "file"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        for folder in (self.root, *(self.root / f for f in FOLDERS)):
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o700)  # prompts and outputs are the clients' business, no one else's

    def _path(self, key: str) -> Path:
        path = Path(key)
        if path.is_absolute():  # a row written before the output stores holds a path
            try:
                key = path.relative_to(self.root).as_posix()
            except ValueError:
                raise ValueError(f"not in this output store: {key!r}") from None
        return self.root / check_key(key)

    def put(self, key: str, data: bytes) -> str:
        path = self._path(key)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)  # readers never see half a file
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return key

    def put_file(self, key: str, path: Path) -> str:
        target = self._path(key)
        try:
            os.replace(path, target)
        except OSError:  # another filesystem
            shutil.copyfile(path, target)
        return key

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, ValueError):
            return None

    def exists(self, key: str) -> bool:
        try:
            return self._path(key).is_file()
        except ValueError:
            return False

    def local_path(self, key: str) -> Path | None:
        path = self._path(key)
        return path if path.is_file() else None

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink(missing_ok=True)
        except ValueError:
            pass

    def scan(self, prefix: str = "") -> Iterator[StoredObject]:
        for folder in FOLDERS:
            if not folder.startswith(prefix.split("/", 1)[0]):
                continue
            try:
                entries = list(os.scandir(self.root / folder))
            except FileNotFoundError:
                continue
            for entry in entries:
                key = f"{folder}/{entry.name}"
                if not key.startswith(prefix) or not _KEY.match(key):
                    continue
                try:
                    stat = entry.stat()
                except FileNotFoundError:  # removed meanwhile
                    continue
                yield StoredObject(key, stat.st_size, stat.st_mtime)

    def check(self) -> None:
        for folder in FOLDERS:
            if not os.access(self.root / folder, os.W_OK | os.X_OK):
                raise PermissionError(13, "the output store is not writable")

    def __repr__(self) -> str:
        return f"LocalOutputStore({str(self.root)!r})"


class S3OutputStore(OutputStore):
    """Objects in an S3-compatible bucket under a prefix (boto3; credentials from the usual
    places: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, a profile, an instance role).

    ``?endpoint_url=http://HOST:PORT`` (or ``AWS_ENDPOINT_URL``) points it at MinIO and other
    S3-compatible servers; ``?region=...`` sets the region.
    """

    scheme = "s3"

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise ConfigError(f"--output-store: expected s3://BUCKET[/PREFIX], got {url!r}")
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise ConfigError(
                "--output-store s3://... needs boto3: pip install 'omni-core[s3]'"
            ) from None
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/")
        if self.prefix:
            self.prefix += "/"
        self._client: Any = boto3.session.Session().client(
            "s3",
            endpoint_url=query.get("endpoint_url"),
            region_name=query.get("region"),
            config=Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=10),
        )

    def _errors(self) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        return BotoCoreError, ClientError

    def _missing(self, exc: Exception) -> bool:
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
        return code in ("404", "NoSuchKey", "NotFound")

    def _call(self, method: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._client, method)(Bucket=self.bucket, **kwargs)
        except self._errors() as exc:
            if self._missing(exc):
                raise FileNotFoundError(kwargs.get("Key", "")) from None
            raise OSError(f"the output store failed: {type(exc).__name__}") from None

    def put(self, key: str, data: bytes) -> str:
        self._call("put_object", Key=self.prefix + check_key(key), Body=data)
        return key

    def put_file(self, key: str, path: Path) -> str:
        with open(path, "rb") as f:
            self._call("put_object", Key=self.prefix + check_key(key), Body=f)
        return key

    def get(self, key: str) -> bytes | None:
        try:
            return self._call("get_object", Key=self.prefix + check_key(key))["Body"].read()
        except (FileNotFoundError, ValueError):
            return None

    def exists(self, key: str) -> bool:
        try:
            self._call("head_object", Key=self.prefix + check_key(key))
        except (FileNotFoundError, ValueError):
            return False
        return True

    def delete(self, key: str) -> None:
        try:
            self._call("delete_object", Key=self.prefix + check_key(key))
        except (FileNotFoundError, ValueError):
            pass

    def scan(self, prefix: str = "") -> Iterator[StoredObject]:
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + prefix
        )
        try:
            for page in pages:
                for item in page.get("Contents", []):
                    key = item["Key"][len(self.prefix) :]
                    if _KEY.match(key):
                        yield StoredObject(key, int(item["Size"]), item["LastModified"].timestamp())
        except self._errors():
            raise OSError("the output store failed while listing") from None

    def check(self) -> None:
        try:
            self._call("head_bucket")
        except FileNotFoundError:
            raise OSError(f"the output bucket {self.bucket!r} does not exist") from None

    def __repr__(self) -> str:
        return f"S3OutputStore({self.bucket!r}, prefix={self.prefix!r})"

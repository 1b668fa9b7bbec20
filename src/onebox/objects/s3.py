"""Objects in an S3 bucket (AWS, MinIO, Ceph, moto... anything S3-compatible).

Selected with ``objects = "s3://bucket/prefix"``; ``objects_endpoint_url``
points at a non-AWS server. Credentials come from the standard AWS chain
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, profiles, instance roles)
unless given explicitly. boto3 is blocking, so every call runs in a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from onebox.errors import NotFound, StorageError
from onebox.objects.base import CHUNK_BYTES, ObjectStore, check_key, missing

T = TypeVar("T")
NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


class S3ObjectStore(ObjectStore):
    """Objects under ``s3://bucket/prefix``."""

    scheme: ClassVar[str] = "s3"

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        max_connections: int = 16,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url
        self._client: Any = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region or "us-east-1",
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            config=Config(max_pool_connections=max_connections, retries={"max_attempts": 3}),
        )

    def describe(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"s3://{self.bucket}/{self.prefix}{where}"

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key)

    async def _call(self, key: str, fn: Callable[[], T]) -> T:
        try:
            return await asyncio.to_thread(fn)
        except ClientError as exc:
            if _error_code(exc) in NOT_FOUND_CODES:
                raise missing(self, key) from exc
            raise StorageError(f"S3 request for {key} in {self.describe()} failed: {exc}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"cannot reach {self.describe()}: {exc}") from exc

    async def put(self, key: str, data: bytes) -> None:
        target = self._key(key)
        await self._call(
            key, lambda: self._client.put_object(Bucket=self.bucket, Key=target, Body=data)
        )

    async def put_file(self, key: str, path: Path) -> None:
        target = self._key(key)
        await self._call(key, lambda: self._client.upload_file(str(path), self.bucket, target))

    async def get(self, key: str) -> bytes:
        source = self._key(key)

        def read() -> bytes:
            response = self._client.get_object(Bucket=self.bucket, Key=source)
            body: bytes = response["Body"].read()
            return body

        return await self._call(key, read)

    async def iter_chunks(self, key: str, chunk_bytes: int = CHUNK_BYTES) -> AsyncIterator[bytes]:
        source = self._key(key)
        response = await self._call(
            key, lambda: self._client.get_object(Bucket=self.bucket, Key=source))
        body = response["Body"]
        try:
            while chunk := await self._call(key, partial(body.read, chunk_bytes)):
                yield chunk
        finally:
            body.close()

    async def get_file(self, key: str, path: Path) -> None:
        source = self._key(key)
        await self._call(key, lambda: self._client.download_file(self.bucket, source, str(path)))

    async def exists(self, key: str) -> bool:
        target = self._key(key)
        try:
            await self._call(key, lambda: self._client.head_object(Bucket=self.bucket, Key=target))
        except NotFound:
            return False
        return True

    async def delete(self, key: str) -> None:
        target = self._key(key)
        await self._call(key, lambda: self._client.delete_object(Bucket=self.bucket, Key=target))

    async def list(self, prefix: str = "") -> list[str]:
        full = self.prefix + prefix

        def collect() -> list[str]:
            keys: list[str] = []
            pages = self._client.get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=full):
                keys.extend(item["Key"][len(self.prefix):] for item in page.get("Contents", []))
            return sorted(keys)

        return await self._call(prefix or "(all)", collect)

    async def close(self) -> None:
        await asyncio.to_thread(self._client.close)


def _error_code(exc: ClientError) -> str:
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = str(error.get("Code", ""))
    return "404" if status == 404 else code

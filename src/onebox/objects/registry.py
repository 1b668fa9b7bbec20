"""Pick the object store named by ``settings.objects``.

    "fs"                      files under $ONEBOX_HOME/objects (the default)
    "fs:///srv/onebox-objs"   files under an explicit directory
    "s3://bucket/prefix"      an S3 bucket; settings.objects_endpoint_url for MinIO etc.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from onebox.config import Settings
from onebox.errors import ConfigError
from onebox.objects.base import ObjectStore
from onebox.objects.fs import FsObjectStore

Factory = Callable[[str, Settings], ObjectStore]


def _fs(url: str, settings: Settings) -> ObjectStore:
    if url == "fs":
        return FsObjectStore(settings.objects_dir)
    path = urlsplit(url).path
    if not path.startswith("/"):
        raise ConfigError(f"objects={url!r}: an fs URL needs an absolute path, e.g. fs:///srv/objs")
    return FsObjectStore(Path(path))


def _s3(url: str, settings: Settings) -> ObjectStore:
    from onebox.objects.s3 import S3ObjectStore  # boto3 is only imported when S3 is used

    parts = urlsplit(url)
    if not parts.netloc:
        raise ConfigError(f"objects={url!r}: name the bucket, e.g. s3://my-bucket/onebox")
    return S3ObjectStore(parts.netloc, parts.path, endpoint_url=settings.objects_endpoint_url)


BACKENDS: dict[str, Factory] = {"fs": _fs, "s3": _s3}


def get_object_store(settings: Settings) -> ObjectStore:
    """The object store configured in ``settings.objects``."""
    url = settings.objects.strip()
    scheme = url.split(":", 1)[0] if ":" in url else url
    factory = BACKENDS.get(scheme)
    if factory is None:
        raise ConfigError(
            f"objects={url!r} is not a known object store; use 'fs', 'fs:///dir' "
            f"or 's3://bucket/prefix' (ONEBOX_OBJECTS)",
            field="objects",
        )
    return factory(url, settings)

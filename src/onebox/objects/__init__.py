"""Object stores: where snapshot blobs and manifests live (``fs`` or ``s3``)."""

from onebox.objects.base import ObjectStore, blob_key, manifest_key
from onebox.objects.fs import FsObjectStore
from onebox.objects.registry import get_object_store

__all__ = ["FsObjectStore", "ObjectStore", "blob_key", "get_object_store", "manifest_key"]

"""Uploads reach the disk, never memory whole, and a tenant has a bounded share of them.

    async with staged_upload(request, state, tenant_id) as staging:
        path = await staging.body()                    # an octet-stream body
        parts = await staging.form(file_fields={"file"})  # or multipart/form-data parts

Each upload takes one of the tenant's ``api.max_concurrent_uploads_per_tenant`` slots in this
server (one more is answered 429 with ``Retry-After``) before its body is read, and the bytes
all of a tenant's uploads have staged at once count against
``api.max_upload_bytes_in_flight_per_tenant`` (past it: 429 too), so one tenant cannot fill
the server's disk while others wait. The body is
read chunk by chunk into files of a private directory (``<home>/upload-staging/<random>``,
0700, files 0600) with a running byte count: past ``api.max_upload_bytes`` the upload is
refused with 413 at once (``BodyLimit`` counts the same body too). The directory goes when the
block ends, whatever happens; the callers hand the staged paths on (to the sandbox, which the
kernel copies them into, or to the object store), so memory holds one chunk at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request

from onebox.api.errors import RequestTooLarge
from onebox.api.state import ApiState
from onebox.errors import TooManyRequests, ValidationError

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

STAGING_DIR = "upload-staging"
MAX_PARTS = 1000
MAX_FIELD_BYTES = 64 << 10  # a text field of a form (a path), kept in memory
RETRY_AFTER_S = 1


@dataclass
class UploadSlots:
    """How many uploads each tenant is streaming into this server now, and their bytes."""

    busy: dict[str, int] = field(default_factory=dict)
    staged: dict[str, int] = field(default_factory=dict)

    def charge(self, tenant_id: str, size: int, limit: int) -> None:
        """Count ``size`` more staged bytes of the tenant; TooManyRequests past ``limit``."""
        held = self.staged.get(tenant_id, 0) + size
        if held > limit:
            raise TooManyRequests(
                f"tenant {tenant_id!r} already has {held - size} bytes of uploads in flight "
                f"here; with these it would pass {limit} "
                "(api.max_upload_bytes_in_flight_per_tenant); retry when one has finished",
                field="file", retry_after_s=RETRY_AFTER_S)
        self.staged[tenant_id] = held

    def release(self, tenant_id: str, size: int) -> None:
        left = self.staged.get(tenant_id, 0) - size
        if left > 0:
            self.staged[tenant_id] = left
        else:
            self.staged.pop(tenant_id, None)

    @contextlib.contextmanager
    def take(self, tenant_id: str, per_tenant: int) -> Iterator[None]:
        if self.busy.get(tenant_id, 0) >= per_tenant:
            raise TooManyRequests(
                f"tenant {tenant_id!r} is already sending {per_tenant} uploads at once, the "
                "most this server takes (api.max_concurrent_uploads_per_tenant); retry when "
                "one has finished", field="file", retry_after_s=RETRY_AFTER_S)
        self.busy[tenant_id] = self.busy.get(tenant_id, 0) + 1
        try:
            yield
        finally:
            left = self.busy[tenant_id] - 1
            if left:
                self.busy[tenant_id] = left
            else:
                del self.busy[tenant_id]


@dataclass
class Part:
    """One part of a multipart form: a staged file, or a small text value."""

    name: str
    filename: str | None = None
    path: Path | None = None
    value: str | None = None
    size: int = 0


UPLOAD_RESPONSES: dict[int | str, dict[str, Any]] = {
    413: {"description": "the body passed api.max_upload_bytes"},
    422: {"description": "a missing or malformed part"},
    429: {"description": "the tenant already streams api.max_concurrent_uploads_per_tenant "
                         "uploads, or api.max_upload_bytes_in_flight_per_tenant bytes; retry "
                         "after Retry-After seconds"}}


def form_doc(files: dict[str, bool], texts: dict[str, int]) -> dict[str, Any]:
    """The OpenAPI request body of a route that stages its multipart form itself: file
    fields (True: several parts) and text fields (their longest length)."""
    binary = {"type": "string", "format": "binary"}
    props: dict[str, Any] = {name: {"type": "array", "items": binary} if many else binary
                             for name, many in files.items()}
    props.update({name: {"type": "string", "maxLength": most} for name, most in texts.items()})
    schema = {"type": "object", "required": list(files), "properties": props}
    return {"requestBody": {"required": True,
                            "content": {"multipart/form-data": {"schema": schema}}}}


def file_parts(parts: list[Part], name: str) -> list[Part]:
    """The staged file parts named ``name``; a text part of that name is refused."""
    found = [p for p in parts if p.name == name]
    if any(p.path is None or p.filename is None for p in found):
        raise ValidationError(f"each multipart {name!r} part must be a file (with a filename)",
                              field=name)
    if not found:
        raise ValidationError(f"the upload holds no {name!r} part: send the file as "
                              f"multipart/form-data field {name!r}", field=name)
    return found


def text_part(parts: list[Part], name: str, most: int) -> str | None:
    values = [p.value for p in parts if p.name == name and p.value is not None]
    if values and len(values[-1]) > most:
        raise ValidationError(f"{name} is longer than {most} characters", field=name)
    return values[-1] if values else None


def slots_of(request: Request) -> UploadSlots:
    """The app's upload slots (one table per server process)."""
    slots: UploadSlots | None = getattr(request.app.state, "upload_slots", None)
    if slots is None:
        slots = request.app.state.upload_slots = UploadSlots()
    return slots


def _private_dir(home: Path) -> Path:
    """A fresh 0700 directory under ``<home>/upload-staging`` (made 0700 too)."""
    root = home / STAGING_DIR
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if root.is_symlink() or not root.is_dir():
        raise OSError(f"{root} is not a directory onebox made")
    os.chmod(root, 0o700)
    path = root / secrets.token_hex(8)
    path.mkdir(mode=0o700)
    return path


@contextlib.asynccontextmanager
async def staged_upload(request: Request, state: ApiState,
                        tenant_id: str) -> AsyncIterator[Staging]:
    """One upload of ``tenant_id``: a slot, a private directory, removed at the end."""
    settings = state.settings.api
    slots = slots_of(request)
    with slots.take(tenant_id, settings.max_concurrent_uploads_per_tenant):
        where = await asyncio.to_thread(_private_dir, state.settings.home)
        staging = Staging(request, where, settings.max_upload_bytes)
        staging.share = (slots, tenant_id, settings.max_upload_bytes_in_flight_per_tenant)
        try:
            yield staging
        finally:
            slots.release(tenant_id, staging.seen)
            await asyncio.to_thread(shutil.rmtree, where, True)


class Staging:
    """Reads one request's body into files of ``where`` (see the module docstring)."""

    def __init__(self, request: Request, where: Path, limit: int) -> None:
        self.request, self.where, self.limit = request, where, limit
        self.seen = 0
        self._files = 0
        self.share: tuple[UploadSlots, str, int] | None = None  # the tenant's bytes in flight

    def new_file(self) -> tuple[Path, int]:
        """A new staged file (0600) and its fd, open for writing."""
        self._files += 1
        path = self.where / f"{self._files:04d}"
        return path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)

    def _count(self, size: int) -> None:
        if self.share is not None:
            slots, tenant_id, limit = self.share
            slots.charge(tenant_id, size, limit)
        self.seen += size
        if self.seen > self.limit:
            raise RequestTooLarge(f"request body larger than {self.limit} bytes; send less "
                                  "(the limit is ONEBOX_API__MAX_UPLOAD_BYTES)")

    async def _chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.request.stream():
                if chunk:
                    self._count(len(chunk))
                    yield chunk
        except ClientDisconnect:
            raise ValidationError("the client went away before the upload ended",
                                  field="file") from None

    async def body(self) -> Path:
        """The whole body, as one staged file."""
        path, fd = self.new_file()
        try:
            async for chunk in self._chunks():
                await asyncio.to_thread(_write_all, fd, chunk)
        finally:
            os.close(fd)
        return path

    async def form(self, file_fields: set[str]) -> list[Part]:
        """The parts of a multipart/form-data body, in order: a part named in
        ``file_fields`` is staged as a file, any other is a text value of at most 64 KiB."""
        content_type, params = parse_options_header(self.request.headers.get("content-type"))
        boundary = params.get(b"boundary")
        if content_type != b"multipart/form-data" or not boundary:
            raise ValidationError("send the upload as multipart/form-data (with a boundary)",
                                  field="Content-Type")
        form = _FormWriter(self, file_fields)
        parser = MultipartParser(boundary, form.callbacks())
        try:
            async for chunk in self._chunks():
                await asyncio.to_thread(parser.write, chunk)
            parser.finalize()
        except FormParserError as exc:
            raise ValidationError(f"the multipart body is malformed: {exc}",
                                  field="file") from exc
        finally:
            form.close()
        if not form.complete:
            raise ValidationError("the multipart body ended before its closing boundary",
                                  field="file")
        return form.parts


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _FormWriter:
    """python-multipart's callbacks: each file part's bytes go straight to its staged file."""

    def __init__(self, staging: Staging, file_fields: set[str]) -> None:
        self.staging, self.file_fields = staging, file_fields
        self.parts: list[Part] = []
        self.complete = False
        self._fd: int | None = None
        self._text = bytearray()
        self._header_name = bytearray()
        self._header_value = bytearray()
        self._disposition = b""

    def callbacks(self) -> MultipartCallbacks:
        return {"on_part_begin": self._begin, "on_header_field": self._header_field,
                "on_header_value": self._header_val, "on_header_end": self._header_end,
                "on_headers_finished": self._headers_done, "on_part_data": self._data,
                "on_part_end": self._end, "on_end": self._finished}

    def _begin(self) -> None:
        if len(self.parts) >= MAX_PARTS:
            raise ValidationError(f"a form holds at most {MAX_PARTS} parts", field="file")
        self._disposition = b""
        self._text.clear()

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def _header_val(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _header_end(self) -> None:
        if bytes(self._header_name).lower() == b"content-disposition":
            self._disposition = bytes(self._header_value)
        self._header_name.clear()
        self._header_value.clear()

    def _headers_done(self) -> None:
        _, options = parse_options_header(self._disposition)
        name = options.get(b"name", b"").decode("utf-8", "replace")
        filename = options.get(b"filename")
        part = Part(name, filename.decode("utf-8", "replace") if filename is not None else None)
        if name in self.file_fields:
            part.path, self._fd = self.staging.new_file()
        self.parts.append(part)

    def _data(self, data: bytes, start: int, end: int) -> None:
        part = self.parts[-1]
        part.size += end - start
        if self._fd is not None:
            _write_all(self._fd, data[start:end])
            return
        if part.size > MAX_FIELD_BYTES:
            raise ValidationError(f"form field {part.name!r} is longer than "
                                  f"{MAX_FIELD_BYTES} bytes", field=part.name or "form")
        self._text += data[start:end]

    def _end(self) -> None:
        part = self.parts[-1]
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        else:
            part.value = self._text.decode("utf-8", "replace")

    def _finished(self) -> None:
        self.complete = True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

"""/v1/uploads: files kept for the caller's tenant until a run names them (``files``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from onebox.api.auth import Caller, State
from onebox.api.staging import UPLOAD_RESPONSES, file_parts, form_doc, staged_upload
from onebox.errors import ValidationError
from onebox.runtime.engine import run_files

router = APIRouter(prefix="/v1/uploads", tags=["runs"])


@router.post("", status_code=201,
             summary="Upload files for a run; name their ids in POST /v1/runs `files`",
             openapi_extra=form_doc({"files": True}, {}),
             responses=UPLOAD_RESPONSES)
async def upload(request: Request, state: State, caller: Caller) -> dict[str, Any]:
    """Each file is placed at its filename (a relative path, e.g. ``reports/q1.txt``) in
    the workspace of the run that names its id. Files are staged on disk as they arrive
    (api/staging), never held whole in memory."""
    limits = state.settings.runtime
    async with staged_upload(request, state, caller.tenant_id) as staging:
        files = file_parts(await staging.form(file_fields={"files"}), "files")
        if len(files) > limits.max_input_files:
            raise ValidationError(f"{len(files)} files sent; a run takes at most "
                                  f"{limits.max_input_files}", field="files")
        saved = []
        for f in files:
            assert f.path is not None  # file_parts checked it
            saved.append(await run_files.save_upload(
                state.db, state.objects(), caller.tenant_id, f.filename or "", f.path, limits))
    return {"uploads": saved}

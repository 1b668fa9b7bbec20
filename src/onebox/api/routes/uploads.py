"""/v1/uploads: files kept for the caller's tenant until a run names them (``files``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, File, UploadFile

from onebox.api.auth import Caller, State
from onebox.errors import ValidationError
from onebox.runtime import run_files

router = APIRouter(prefix="/v1/uploads", tags=["runs"])


@router.post("", status_code=201,
             summary="Upload files for a run; name their ids in POST /v1/runs `files`")
async def upload(state: State, caller: Caller,
                 files: Annotated[list[UploadFile], File()]) -> dict[str, Any]:
    """Each file is placed at its filename (a relative path, e.g. ``reports/q1.txt``) in
    the workspace of the run that names its id."""
    limits = state.settings.runtime
    if len(files) > limits.max_input_files:
        raise ValidationError(f"{len(files)} files sent; a run takes at most "
                              f"{limits.max_input_files}", field="files")
    saved = []
    for f in files:
        saved.append(await run_files.save_upload(
            state.db, state.objects(), caller.tenant_id, f.filename or "", await f.read(),
            limits))
    return {"uploads": saved}

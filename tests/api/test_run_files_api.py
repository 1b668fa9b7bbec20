"""Files in and out through the API: upload, name the uploads in a run, read what it kept."""

from __future__ import annotations

import asyncio
import io
import json
import zipfile

from api_helpers import Api, wait_status

READS_WRITES = {"name": "csv-report", "steps": [
    {"id": "report", "tool": "bash",
     "code": "wc -l < data/sales.csv > report.txt; cat data/sales.csv"},
]}


async def test_uploaded_files_reach_the_step_and_its_report_is_downloadable(api: Api) -> None:
    async with api.client() as c:
        up = await c.post("/v1/uploads", files=[
            ("files", ("data/sales.csv", b"region,sales\nnorth,3\n", "text/csv"))])
        assert up.status_code == 201, up.text
        upload = up.json()["uploads"][0]
        assert upload["path"] == "data/sales.csv" and upload["size_bytes"] == 21
        made = await c.post("/v1/runs", json={"plan": READS_WRITES, "files": [upload["id"]]})
        assert made.status_code == 201, made.text
        run_id = made.json()["run_id"]
        await wait_status(c, run_id, "SUCCEEDED")
        steps = (await c.get(f"/v1/runs/{run_id}/steps")).json()["steps"]
        assert steps[0]["stdout"] == "region,sales\nnorth,3\n"
        for _ in range(100):  # the worker keeps the outputs as it releases the workspace
            listed = (await c.get(f"/v1/runs/{run_id}/artifacts")).json()["files"]
            if listed:
                break
            await asyncio.sleep(0.1)
        assert [(f["path"], f["step_id"]) for f in listed] == [("report.txt", "report")]
        one = await c.get(f"/v1/runs/{run_id}/artifacts/report.txt")
        assert one.status_code == 200 and one.content == b"2\n"
        zipped = await c.get(f"/v1/runs/{run_id}/artifacts", params={"zip": 1})
        with zipfile.ZipFile(io.BytesIO(zipped.content)) as archive:
            manifest = json.loads(archive.read("manifest.json"))["files"]
            assert manifest[0]["sha256"] == listed[0]["sha256"]
            assert archive.read("files/report.txt") == b"2\n"


async def test_an_unknown_upload_id_is_a_404_naming_files(api: Api) -> None:
    async with api.client() as c:
        made = await c.post("/v1/runs", json={
            "plan": READS_WRITES, "files": ["00000000-0000-4000-8000-000000000000"]})
        assert made.status_code == 404 and made.json()["field"] == "files"
        missing = await c.get("/v1/runs/00000000-0000-4000-8000-000000000000/artifacts")
        assert missing.status_code == 404

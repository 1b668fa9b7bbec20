"""Sessions over HTTP: execute, files in and out (never through a planted symlink), snapshots, delete."""

from __future__ import annotations

import io
import tarfile

from api_helpers import Api

from onebox.objects import get_object_store
from onebox.snapshots.archive import record_snapshot


async def test_session_execute_upload_list_download_delete(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        r = await c.post("/v1/sessions")
        assert r.status_code == 201
        sid = r.json()["id"]
        up = await c.post(f"/v1/sessions/{sid}/files", files={"file": ("in.csv", b"a,b\n1,2\n")},
                          data={"path": "data/in.csv"})
        assert up.status_code == 201, up.text
        run = await c.post(f"/v1/sessions/{sid}/execute", json={
            "language": "python",
            "code": "rows = open('data/in.csv').read().splitlines()\n"
                    "open('out.txt', 'w').write(str(len(rows)))\nprint('rows', len(rows))"})
        assert run.status_code == 200, run.text
        result = run.json()
        assert result["ok"] and result["execution_count"] == 1  # python: the stateful interpreter
        assert result["stdout"].strip() == "rows 2"
        assert any(f["path"] == "out.txt" for f in result["files_written"])
        listing = (await c.get(f"/v1/sessions/{sid}/files")).json()["files"]
        assert {f["path"] for f in listing if f["type"] == "file"} == {"data/in.csv", "out.txt"}
        got = await c.get(f"/v1/sessions/{sid}/files/out.txt")
        assert got.status_code == 200 and got.content == b"2"
        failed = await c.post(f"/v1/sessions/{sid}/execute",
                              json={"language": "bash", "code": "echo oops >&2; exit 3"})
        assert failed.status_code == 200 and failed.json()["exit_code"] == 3
        assert sid in [s["id"] for s in (await c.get("/v1/sessions")).json()["sessions"]]
        assert (await c.delete(f"/v1/sessions/{sid}")).status_code == 204
        assert (await c.get(f"/v1/sessions/{sid}/files")).status_code == 404
        assert sid not in [s["id"] for s in (await c.get("/v1/sessions")).json()["sessions"]]


async def test_download_refuses_symlinks_planted_by_sandboxed_code(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        sid = (await c.post("/v1/sessions")).json()["id"]
        await c.post(f"/v1/sessions/{sid}/execute", json={
            "language": "bash", "code": "ln -s /etc/passwd leak; mkdir d; ln -s /etc dir; echo x > d/ok"})
        assert (await c.get(f"/v1/sessions/{sid}/files/leak")).status_code == 404
        assert (await c.get(f"/v1/sessions/{sid}/files/dir/passwd")).status_code == 404
        assert (await c.get(f"/v1/sessions/{sid}/files/d/ok")).content == b"x\n"
        traversal = await c.get(f"/v1/sessions/{sid}/files/d/..%2F..%2F..%2Fetc%2Fpasswd")
        assert traversal.status_code in (400, 404, 422)  # 400: dot segments, refused first
        assert b"root:" not in traversal.content
        bad = await c.post(f"/v1/sessions/{sid}/files", files={"file": ("x", b"x")},
                           data={"path": "../escape.txt"})
        assert bad.status_code == 422 and bad.json()["field"] == "path"


async def test_snapshot_download_and_restore_into_a_new_session(api_no_worker: Api) -> None:
    rt = api_no_worker.rt
    async with api_no_worker.client() as c:
        sid = (await c.post("/v1/sessions")).json()["id"]
        await c.post(f"/v1/sessions/{sid}/execute",
                     json={"language": "bash", "code": "mkdir -p sub; echo hello > sub/a.txt"})
        store = get_object_store(api_no_worker.settings)
        snap = await record_snapshot(rt.db, store, rt.backend.workspace(sid), session_id=sid)
        await store.close()
        listed = (await c.get("/v1/snapshots", params={"session_id": sid})).json()["snapshots"]
        assert [s["id"] for s in listed] == [str(snap.id)]
        tgz = await c.get(f"/v1/snapshots/{snap.id}/download")
        assert tgz.status_code == 200
        with tarfile.open(fileobj=io.BytesIO(tgz.content)) as tar:
            member = tar.extractfile("sub/a.txt")
            assert member is not None and member.read() == b"hello\n"
        restored = await c.post(f"/v1/snapshots/{snap.id}/restore")
        assert restored.status_code == 201, restored.text
        new_sid = restored.json()["session"]["id"]
        assert new_sid != sid and restored.json()["file_count"] == 1
        out = await c.post(f"/v1/sessions/{new_sid}/execute",
                           json={"language": "bash", "code": "cat sub/a.txt"})
        assert out.json()["stdout"] == "hello\n"

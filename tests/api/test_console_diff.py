"""The workspace diff between two step attempts: GET /v1/runs/{id}/diff over the real
database, sandbox and object store, and the console's "compare" card in a real headless
Chromium (escaped text only: a file named like an HTML tag, or holding HTML, shows as text).

Screenshots go to test-artifacts/console-diff*.png.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from api_helpers import Api, wait_status
from test_console_actions import PHONE, no_sideways_scroll
from test_console_browser import ARTIFACTS, browser, open_console  # noqa: F401 (fixture)

from onebox.runtime.services import workspace_diff

HOSTILE_NAME = "<img src=x onerror=alert(1)>"
HOSTILE_TEXT = "<script>document.title='pwned'</script><b>bold?</b>"
DIFFED = {"name": "diffed", "steps": [
    {"id": "first", "tool": "bash",
     "code": "printf 'alpha\\nbeta\\ngamma\\n' > notes.txt; printf 'bye' > gone.txt; "
             "printf '\\000\\001\\002' > blob.bin"},
    {"id": "second", "tool": "bash", "depends_on": ["first"],
     "code": "printf 'alpha\\nBETA\\ngamma\\n' > notes.txt; rm gone.txt; "
             "printf '\\000\\001\\003' > blob.bin; "
             f"printf '%s\\n' \"{HOSTILE_TEXT}\" > '{HOSTILE_NAME}'; "
             "head -c 300000 /dev/zero | tr '\\000' a > big.txt; mkdir zmany; "
             "for i in $(seq 10 34); do echo \"file $i\" > zmany/f$i.txt; done"},
]}
GATED = {"name": "gated", "steps": [
    {"id": "gate", "kind": "approval", "input": {"prompt": "go?"}},
]}


async def _steps(c: httpx.AsyncClient, run_id: str) -> dict[str, dict[str, Any]]:
    steps = (await c.get(f"/v1/runs/{run_id}/steps")).json()["steps"]
    return {s["step_id"]: s for s in steps}


async def _diffed_run(c: httpx.AsyncClient) -> tuple[str, dict[str, dict[str, Any]]]:
    run_id = (await c.post("/v1/runs", json={"plan": DIFFED})).json()["run_id"]
    await wait_status(c, run_id, "SUCCEEDED")
    return run_id, await _steps(c, run_id)


def _by_path(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["path"]: f for f in body["files"]}


async def test_diff_of_a_step_against_the_workspace_before_it(api: Api) -> None:
    async with api.client() as c:
        run_id, steps = await _diffed_run(c)
        r = await c.get(f"/v1/runs/{run_id}/diff",
                        params={"to": steps["second"]["execution_id"]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["from"]["source"] == "pre_snapshot" and body["to"]["step_id"] == "second"
    files = _by_path(body)
    notes = files["notes.txt"]
    assert notes["change"] == "changed" and notes["binary"] is False
    assert "-beta\n+BETA\n" in notes["diff"] and notes["size_before"] == notes["size_after"]
    assert files["gone.txt"]["change"] == "removed" and files["gone.txt"]["size_after"] is None
    assert files["blob.bin"]["binary"] is True and files["blob.bin"]["diff"] is None
    hostile = files[HOSTILE_NAME]
    assert hostile["change"] == "added" and HOSTILE_TEXT in hostile["diff"]
    assert "no diff shown" in files["big.txt"]["note"] and files["big.txt"]["diff"] is None
    assert files["zmany"]["type_after"] == "dir"
    diffs = [f for f in body["files"] if f["diff"]]
    assert len(diffs) == workspace_diff.MAX_TEXT_FILES and body["truncated"] is True
    assert body["summary"] == {"added": 28, "removed": 1, "changed": 2}


async def test_diff_between_two_chosen_steps_and_the_default(api: Api) -> None:
    async with api.client() as c:
        run_id, steps = await _diffed_run(c)
        first, second = steps["first"]["execution_id"], steps["second"]["execution_id"]
        back = (await c.get(f"/v1/runs/{run_id}/diff",
                            params={"from": second, "to": first})).json()
        default = (await c.get(f"/v1/runs/{run_id}/diff")).json()
        initial = (await c.get(f"/v1/runs/{run_id}/diff", params={"to": first})).json()
    files = _by_path(back)
    assert files["gone.txt"]["change"] == "added" and files[HOSTILE_NAME]["change"] == "removed"
    assert "-BETA\n+beta\n" in files["notes.txt"]["diff"]
    assert default["to"]["execution_id"] == second
    assert {f["path"] for f in _by_path(initial).values()} == {"notes.txt", "gone.txt",
                                                               "blob.bin"}
    assert _by_path(initial)["notes.txt"]["change"] == "added"


async def test_diff_refuses_steps_of_another_run_or_tenant_naming_the_field(api: Api) -> None:
    async with api.client() as c:
        run_id, steps = await _diffed_run(c)
        other = (await c.post("/v1/runs", json={"plan": GATED})).json()["run_id"]
        await wait_status(c, other, "WAITING")
        gate = (await _steps(c, other))["gate"]["execution_id"]
        foreign = await c.get(f"/v1/runs/{run_id}/diff", params={"from": gate})
        no_snapshot = await c.get(f"/v1/runs/{other}/diff", params={"to": gate})
        unknown = await c.get(f"/v1/runs/{run_id}/diff", params={"to": str(uuid.uuid4())})
        bad = await c.get(f"/v1/runs/{run_id}/diff", params={"from": "../etc/passwd"})
        nothing = await c.get(f"/v1/runs/{other}/diff")
    async with api.client("globex") as g:
        tenant = await g.get(f"/v1/runs/{run_id}/diff",
                             params={"to": steps["second"]["execution_id"]})
    assert (foreign.status_code, foreign.json()["field"]) == (404, "from")
    assert (no_snapshot.status_code, no_snapshot.json()["field"]) == (404, "to")
    assert "no workspace snapshot" in no_snapshot.json()["message"]
    assert (unknown.status_code, unknown.json()["field"]) == (404, "to")
    assert (bad.status_code, bad.json()["field"]) == (422, "from")
    assert (nothing.status_code, nothing.json()["field"]) == (404, "to")
    assert tenant.status_code == 404
    assert all(r.status_code < 500 for r in (foreign, no_snapshot, unknown, bad, nothing))


async def test_console_compares_two_steps_and_shows_html_as_text(api: Api,
                                                                 browser: Any) -> None:  # noqa: F811
    ARTIFACTS.mkdir(exist_ok=True)
    async with api.client() as c:
        run_id, steps = await _diffed_run(c)
    page = await open_console(browser, api)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    await page.goto(f"{api.url}/ui/#/runs/{run_id}")
    await page.click("#dag g[data-step=second]")
    await page.click("[data-attempt='second#1'] button.compare-previous")
    card = "#workspace-diff"
    await page.wait_for_selector(f"{card} [data-diff-file='notes.txt'] pre.diff:has-text('+BETA')")
    assert await page.query_selector(f"{card} img") is None
    assert await page.query_selector(f"{card} script, {card} b") is None
    name = await page.text_content(f"{card} [data-diff-file='{HOSTILE_NAME}'] .diff-path")
    assert name == HOSTILE_NAME
    shown = await page.text_content(f"{card} [data-diff-file='{HOSTILE_NAME}'] pre.diff")
    assert shown is not None and HOSTILE_TEXT in shown
    binary = await page.text_content(f"{card} [data-diff-file='blob.bin']")
    assert binary is not None and "binary" in binary
    await page.screenshot(path=str(ARTIFACTS / "console-diff.png"), full_page=True)
    await page.select_option("#diff-from", steps["second"]["execution_id"])
    await page.select_option("#diff-to", steps["first"]["execution_id"])
    await page.click("#diff-compare")
    await page.wait_for_selector(f"{card} [data-diff-file='gone.txt'][data-change=added]")
    assert await page.title() != "pwned" and dialogs == []
    await page.set_viewport_size(PHONE)
    await no_sideways_scroll(page)
    await page.screenshot(path=str(ARTIFACTS / "console-diff-390.png"), full_page=True)
    assert page.errors == []

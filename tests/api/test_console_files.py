"""A run's files in the console, in a real headless Chromium: input files on the new-run
form, the kept outputs with downloads that carry the API key, a running step's live
output, and the files an approver is asked to sign off.

Screenshots go to test-artifacts/console-*.png.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

from api_helpers import Api, wait_status
from test_console_browser import ARTIFACTS, browser, open_console  # noqa: F401 (fixture)

WRITER = {"name": "writer", "steps": [
    {"id": "write", "tool": "bash",
     "code": "mkdir -p sub && printf 'a,b\\n1,2\\n' > out.csv && echo nested > sub/b.txt"},
]}
TALKER = {"name": "talker", "steps": [
    {"id": "talk", "tool": "bash",
     "code": "for i in $(seq 1 300); do echo line $i; done; echo 'warming up' >&2; "
             "while [ ! -e go ]; do sleep 0.1; done; echo done"},
]}
REVIEWED = {"name": "reviewed", "steps": [
    {"id": "draft", "tool": "bash", "code": "echo 'Q3 numbers' > q3-report.txt"},
    {"id": "gate", "kind": "approval", "input": {"prompt": "Send the draft?"},
     "depends_on": ["draft"]},
]}


async def test_new_run_with_input_files(api: Api, browser: Any) -> None:  # noqa: F811
    page = await open_console(browser, api)
    await page.click("#new-run")
    await page.click("button[data-kind=plan]")
    await page.fill("#new-text", "name: with files\nsteps:\n  - id: read\n    tool: bash\n"
                    "    code: cat notes.txt\n")
    await page.set_input_files("#new-files", [
        {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"uploaded from the console\n"},
        {"name": "data.bin", "mimeType": "application/octet-stream", "buffer": bytes(2048)},
    ])
    await page.click("#new-submit")
    await page.wait_for_selector("h1 .badge[data-status=SUCCEEDED]", timeout=30_000)
    inputs = await page.text_content("#run-inputs")
    assert inputs is not None and "notes.txt (26 B)" in inputs and "data.bin (2.0 KB)" in inputs
    await page.click("#dag g[data-step=read]")
    await page.wait_for_selector("pre.stdout:has-text('uploaded from the console')")
    assert page.errors == []


async def _saved(page: Any, selector: str) -> tuple[str, bytes]:
    async with page.expect_download() as info:
        await page.click(selector)
    download = await info.value
    return download.suggested_filename, Path(await download.path()).read_bytes()


async def test_files_card_downloads_with_the_api_key(api: Api, browser: Any) -> None:  # noqa: F811
    ARTIFACTS.mkdir(exist_ok=True)
    async with api.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": WRITER})).json()["run_id"]
        await wait_status(c, run_id, "SUCCEEDED")
    page = await open_console(browser, api)
    await page.goto(f"{api.url}/ui/#/runs/{run_id}")
    row = "#run-files tr[data-file='out.csv']"
    await page.wait_for_selector(row, timeout=30_000)
    await page.wait_for_selector("#run-files tr[data-file='sub/b.txt']")
    text = await page.text_content(row)
    assert text is not None and "8 B" in text and "write" in text
    await page.screenshot(path=str(ARTIFACTS / "console-files.png"), full_page=True)
    name, data = await _saved(page, f"{row} button.download-file")
    assert (name, data) == ("out.csv", b"a,b\n1,2\n")
    name, data = await _saved(page, "#run-files tr[data-file='sub/b.txt'] button.download-file")
    assert (name, data) == ("b.txt", b"nested\n")
    name, data = await _saved(page, "#download-zip")
    assert name == f"run-{run_id}.zip"
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        assert {"files/out.csv", "files/sub/b.txt", "manifest.json"} <= set(z.namelist())
        assert z.read("files/out.csv") == b"a,b\n1,2\n"
    assert page.errors == []


async def test_running_step_shows_its_live_output(api: Api, browser: Any) -> None:  # noqa: F811
    async with api.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": TALKER})).json()["run_id"]
    page = await open_console(browser, api)
    await page.goto(f"{api.url}/ui/#/runs/{run_id}")
    live = "[data-attempt='talk#1'] pre.live-stdout"
    await page.wait_for_selector(f"{live}:has-text('line 300')", timeout=30_000)
    await page.wait_for_selector("[data-attempt='talk#1'] pre.live-stderr:has-text('warming up')")
    assert await page.get_attribute("#dag g[data-step=talk]", "data-status") == "RUNNING"
    lines = (await page.text_content(live) or "").split("\n")
    assert len(lines) <= 200, f"{len(lines)} lines kept in the page"
    assert "line 300" in lines and "line 50" not in lines
    (api.rt.backend.workspace(f"run-{run_id}") / "go").write_text("")  # the step may end
    await page.wait_for_selector("[data-attempt='talk#1'] pre.stdout:has-text('done')",
                                 timeout=30_000)
    assert await page.query_selector(live) is None
    assert page.errors == []


async def test_approval_card_lists_the_files_under_review(api: Api,
                                                         browser: Any) -> None:  # noqa: F811
    async with api.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": REVIEWED})).json()["run_id"]
        await wait_status(c, run_id, "WAITING")
    page = await open_console(browser, api)
    await page.goto(f"{api.url}/ui/#/runs/{run_id}")
    card = "[data-approval=gate]"
    await page.wait_for_selector(f"{card} .approval-prompt:has-text('Send the draft?')",
                                 timeout=30_000)
    await page.wait_for_selector(f"{card} .approval-files li:has-text('q3-report.txt')")
    assert page.errors == []

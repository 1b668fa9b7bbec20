"""Issue 14's "Done when", walked in the console alone, in a real headless Chromium: start a
task with a CSV, watch its step print live, approve a step knowing what is approved (its
prompt and the files under review), read the answer, download the report, compare the
workspace before and after the step, and retry a failed run until it succeeds.

The agent's model is scripted (the `agent_api` fixture); the database, sandbox, worker,
object store and API are real. Screenshots go to test-artifacts/issue14-*.png.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from api_helpers import Api, wait_status
from test_console_browser import ARTIFACTS, browser, open_console  # noqa: F401 (fixture)

CSV = b"region,amount\nnorth,10\nsouth,20\neast,30\n"
INTENT = {"goal": "summarise the sales", "entities": ["data.csv"], "capabilities": ["python"],
          "formats": ["csv", "md"], "risks": [], "fallbacks": []}
SUMMARISE = """\
import csv, sys, time
rows = list(csv.DictReader(open('data.csv')))
for i, row in enumerate(rows, 1):
    print(f"reading row {i}: {row['region']}", file=sys.stderr, flush=True)
import os
deadline = time.time() + 8  # the test says when it has seen the step running: 'go'
while not os.path.exists('go') and time.time() < deadline:
    time.sleep(0.05)
total = sum(int(r['amount']) for r in rows)
open('report.md', 'w').write(f"# Sales report\\n\\nrows: {len(rows)}\\ntotal: {total}\\n")
print(f"total: {total}")
"""
PLAN = {"name": "sales report", "steps": [
    {"id": "summarise", "tool": "python", "code": SUMMARISE},
    {"id": "publish", "kind": "approval", "depends_on": ["summarise"],
     "input": {"prompt": "Publish report.md to finance?"}},
    {"id": "done", "kind": "final", "depends_on": ["summarise", "publish"],
     "input": {"answer": "{{ summarise.stdout }}"}},
]}
FLAKY = """name: flaky
steps:
  - id: fetch
    tool: bash
    max_attempts: 1
    code: |
      if [ -f tried.flag ]; then echo 'second try worked'
      else touch tried.flag; echo 'upstream timed out' >&2; exit 3; fi
"""


def release_running_steps(api: Api) -> None:
    """Tell the steps waiting for 'go' in their workspace that the test has seen them run."""
    for workspace in api.rt.backend.workspace("run-x").parent.glob("run-*"):
        with contextlib.suppress(OSError):
            (workspace / "go").write_text("")


async def _until_running(client: Any, run_id: str) -> None:
    for _ in range(600):
        steps = (await client.get(f"/v1/runs/{run_id}")).json()["steps"]
        if any(s["step_id"] == "summarise" and s["status"] == "RUNNING" for s in steps):
            return
        await asyncio.sleep(0.05)


async def test_a_task_runs_steps_and_planner_see_its_input_file(agent_api: Api) -> None:
    """Before, the agent's first model call opened the workspace to describe it, so the
    run's input files were never placed: the step failed with FileNotFoundError."""
    agent_api.model.add(INTENT, PLAN)
    async with agent_api.client() as c:
        upload = await c.post("/v1/uploads", files=[("files", ("data.csv", CSV, "text/csv"))])
        ids = [u["id"] for u in upload.json()["uploads"]]
        run_id = (await c.post("/v1/runs", json={"task": "summarise", "files": ids})).json()[
            "run_id"]
        await _until_running(c, run_id)
        release_running_steps(agent_api)
        detail = await wait_status(c, run_id, "WAITING", "FAILED", "DEAD", "SUCCEEDED")
    steps = {s["step_id"]: s for s in detail["steps"]}
    assert steps["summarise"]["status"] == "SUCCESS", steps["summarise"]["stderr"]
    assert steps["summarise"]["stdout"] == "total: 60\n"
    planner = agent_api.model.requests[1]
    assert any("data.csv" in (m.content or "") for m in planner.messages)


async def _start_task_with_a_csv(page: Any) -> None:
    await page.click("#new-run")
    await page.fill("#new-text", "Summarise the sales in data.csv into report.md")
    await page.set_input_files("#new-files", [
        {"name": "data.csv", "mimeType": "text/csv", "buffer": CSV}])
    await page.click("#new-submit")


async def _saved(page: Any, selector: str) -> tuple[str, bytes]:
    async with page.expect_download() as info:
        await page.click(selector)
    download = await info.value
    return download.suggested_filename, Path(await download.path()).read_bytes()


async def test_a_task_with_a_csv_from_start_to_report(agent_api: Api,
                                                      browser: Any) -> None:  # noqa: F811
    ARTIFACTS.mkdir(exist_ok=True)
    agent_api.model.add(INTENT, PLAN)
    page = await open_console(browser, agent_api)
    await _start_task_with_a_csv(page)
    await page.wait_for_selector("#run-inputs:has-text('data.csv (40 B)')", timeout=30_000)
    live = "[data-attempt='summarise#1'] pre.live-stderr"
    await page.wait_for_selector(f"{live}:has-text('reading row 3: east')", timeout=30_000)
    assert await page.get_attribute("#dag g[data-step=summarise]", "data-status") == "RUNNING"
    await page.screenshot(path=str(ARTIFACTS / "issue14-live.png"), full_page=True)
    release_running_steps(agent_api)

    card = "[data-approval=publish]"
    await page.wait_for_selector(f"{card} .approval-prompt:has-text('Publish report.md to "
                                 "finance?')", timeout=30_000)
    await page.wait_for_selector(f"{card} .approval-files li:has-text('report.md')")
    await page.screenshot(path=str(ARTIFACTS / "issue14-approval.png"), full_page=True)
    await page.click("#approve-publish")

    await page.wait_for_selector("h1 .badge[data-status=SUCCEEDED]", timeout=30_000)
    await page.wait_for_selector("#run-answer pre:has-text('total: 60')")
    row = "#run-files tr[data-file='report.md']"
    await page.wait_for_selector(row)
    name, data = await _saved(page, f"{row} button.download-file")
    assert (name, data) == ("report.md", b"# Sales report\n\nrows: 3\ntotal: 60\n")

    await page.click("#dag g[data-step=summarise]")
    await page.click("[data-attempt='summarise#1'] button.compare-previous")
    await page.wait_for_selector("#workspace-diff [data-diff-file='report.md'][data-change=added]"
                                 " pre.diff:has-text('+total: 60')")
    await page.screenshot(path=str(ARTIFACTS / "issue14-answer.png"), full_page=True)
    assert page.errors == []


async def test_a_failed_run_is_retried_from_the_console(api: Api,
                                                       browser: Any) -> None:  # noqa: F811
    page = await open_console(browser, api)
    await page.click("#new-run")
    await page.click("button[data-kind=plan]")
    await page.fill("#new-text", FLAKY)
    await page.click("#new-submit")
    await page.wait_for_selector("#run-cause pre:has-text('upstream timed out')", timeout=30_000)
    await page.click("#retry-run")
    await page.wait_for_selector("h1 .badge[data-status=SUCCEEDED]", timeout=30_000)
    await page.wait_for_selector("[data-attempt='fetch#2'] pre.stdout:has-text('second try "
                                 "worked')")
    await page.screenshot(path=str(ARTIFACTS / "issue14-retried.png"), full_page=True)
    assert page.errors == []

"""The console as a place to act, in a real headless Chromium: cancel, retry, new run,
approve knowing what is approved, a failed run opening on its cause, runs list usage and
paging, model calls, confirm before forgetting, dark mode and a 390 px layout.

Screenshots go to test-artifacts/console-*.png.
"""

from __future__ import annotations

import uuid
from typing import Any

from api_helpers import Api, wait_status
from test_console_api import add_call
from test_console_browser import ARTIFACTS, browser, open_console  # noqa: F401 (fixture)

from onebox.store.runs import append_event

PHONE = {"width": 390, "height": 844}
FAILING = {"name": "fails", "steps": [
    {"id": "fetch", "tool": "bash", "code": "echo fetched"},
    {"id": "parse", "tool": "bash", "max_attempts": 1, "depends_on": ["fetch"],
     "code": "echo 'reading rows' >&2; echo 'ValueError: column total is missing' >&2; exit 3"},
]}
GATED = {"name": "gated", "steps": [
    {"id": "gate", "kind": "approval", "input": {"prompt": "Send the Q3 report to finance?"}},
    {"id": "send", "tool": "bash", "code": "echo sent", "depends_on": ["gate"]},
]}


async def no_sideways_scroll(page: Any) -> None:
    width = await page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"the page scrolls sideways: {width[0]} px in {width[1]} px"


async def test_cancel_from_the_run_page(api_no_worker: Api, browser: Any) -> None:  # noqa: F811
    async with api_no_worker.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": GATED})).json()["run_id"]
    page = await open_console(browser, api_no_worker)
    await page.goto(f"{api_no_worker.url}/ui/#/runs/{run_id}")
    await page.click("#cancel-run")
    await page.wait_for_selector("h1 .badge[data-status=CANCELLED]")
    assert await page.query_selector("#cancel-run") is None
    async with api_no_worker.client() as c:
        await wait_status(c, run_id, "CANCELLED")
    assert page.errors == []


async def test_failed_run_opens_on_the_cause_and_retries(api: Api, browser: Any) -> None:  # noqa: F811
    ARTIFACTS.mkdir(exist_ok=True)
    async with api.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": FAILING})).json()["run_id"]
        await wait_status(c, run_id, "DEAD", "FAILED")
    page = await open_console(browser, api)
    await page.goto(f"{api.url}/ui/#/runs/{run_id}")
    await page.wait_for_selector("#run-cause:has-text('step parse failed')")
    await page.wait_for_selector("#run-cause pre:has-text('ValueError: column total is missing')")
    await page.wait_for_selector("[data-attempt='parse#1']")  # opened on the failed step
    assert await page.query_selector("[data-attempt='fetch#1']") is None
    assert await page.get_attribute("#dag g[data-step=parse]", "class") == "node n-FAILED selected"
    await page.screenshot(path=str(ARTIFACTS / "console-failed-run.png"), full_page=True)
    stray = await page.evaluate("[...document.querySelector('main').childNodes]"
                                ".filter(n => n.nodeType === 3 && n.textContent.trim()).length")
    assert stray == 0, "stray text (e.g. 'null') rendered in the page"
    await page.click("#retry-run")
    await page.wait_for_selector("[data-attempt='parse#2']", timeout=30_000)
    heading = await page.text_content("[data-attempt='parse#2'] h2")
    assert heading is not None and "attempt 2 of" in heading
    count, limit = (int(x) for x in heading.split("attempt ")[1].split(" ")[0:3:2])
    assert count <= limit, heading
    assert page.errors == []


async def test_new_run_from_a_task_or_a_yaml_plan(api: Api, browser: Any) -> None:  # noqa: F811
    page = await open_console(browser, api)
    await page.click("#new-run")
    await page.click("button[data-kind=plan]")
    await page.fill("#new-text", "steps:\n  - id: a\n    bogus: 1\n")
    await page.click("#new-submit")
    await page.wait_for_selector("#new-result .error-box:has-text('steps[a]')")
    await page.fill("#new-text", "name: typed here\nsteps:\n  - id: hi\n    tool: bash\n"
                    "    code: echo typed in the console\n")
    await page.click("#new-submit")
    await page.wait_for_selector("h1 .badge[data-status=SUCCEEDED]", timeout=30_000)
    await page.click("#dag g[data-step=hi]")
    await page.wait_for_selector("pre.stdout:has-text('typed in the console')")
    await page.goto(f"{api.url}/ui/#/new")
    await page.fill("#new-text", "summarise the report")
    await page.click("#new-submit")  # this server has no model: a clear refusal, no 500
    await page.wait_for_selector("#new-result .error-box")
    assert "500" not in (await page.text_content("#new-result") or "")
    assert page.errors == []


async def test_approval_card_shows_the_prompt_and_reject_fails_the_run(api: Api,
                                                                       browser: Any) -> None:  # noqa: F811
    async with api.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": GATED})).json()["run_id"]
    page = await open_console(browser, api)
    await page.goto(f"{api.url}/ui/#/runs/{run_id}")
    await page.wait_for_selector("[data-approval=gate] .approval-prompt:has-text("
                                 "'Send the Q3 report to finance?')", timeout=30_000)
    await page.click("#reject-gate")
    await page.wait_for_selector("h1 .badge[data-status=FAILED]", timeout=30_000)
    assert page.errors == []


async def test_runs_list_usage_paging_and_model_calls(api_no_worker: Api,
                                                      browser: Any) -> None:  # noqa: F811
    async with api_no_worker.client() as c:
        first = (await c.post("/v1/runs", json={"plan": GATED})).json()["run_id"]
        call = await add_call(api_no_worker, first, tokens=(1200, 34), cost_usd=0.0123,
                              prompt="which step is risky?")
        for _ in range(104):
            await c.post("/v1/runs", json={"plan": GATED})
    page = await open_console(browser, api_no_worker)
    await page.wait_for_selector("#runs-older:not([hidden])")
    assert len(await page.query_selector_all("#runs-body tr")) == 100
    assert await page.query_selector(f"tr[data-run='{first}']") is None
    await page.click("#runs-older")
    row = f"tr[data-run='{first}']"
    await page.wait_for_selector(row)
    assert len(await page.query_selector_all("#runs-body tr")) == 5
    assert await page.is_hidden("#runs-older")
    text = await page.text_content(row)
    assert text is not None and "1,234" in text and "$0.0123" in text
    await page.click(row)
    await page.wait_for_selector(f"#model-calls tr[data-call-row='{call}']:has-text('1200/34')")
    await page.click(f"button[data-call='{call}']")
    await page.wait_for_selector("pre.call-prompt:has-text('which step is risky?')")
    await page.wait_for_selector("pre.call-reply:has-text('hi')")
    # the page is drawn again on every event of the run: the opened call stays open
    await page.evaluate("document.querySelector('#run-id').dataset.old = 'yes'")
    async with api_no_worker.rt.db.transaction() as conn:
        await append_event(conn, uuid.UUID(first), "note", {}, trace_id=None)
    await page.wait_for_selector("#run-id:not([data-old])")
    assert await page.is_visible("pre.call-reply:has-text('hi')")
    assert page.errors == []


async def test_forget_asks_first_and_memory_can_be_added(kapi: Api, browser: Any) -> None:  # noqa: F811
    page = await open_console(browser, kapi)
    await page.goto(f"{kapi.url}/ui/#/memory")
    await page.fill("#mem-add-scope", "team")
    await page.fill("#mem-add-content", "Backups live in bucket b-42.")
    await page.click("#mem-add button[type=submit]")
    row = "#mem-rows tr:has-text('Backups live in bucket b-42.')"
    await page.wait_for_selector(row)
    await page.click(f"{row} button.forget")
    await page.wait_for_selector(f"{row} button.confirm-forget")
    await page.click(f"{row} button.keep")
    await page.wait_for_selector(f"{row} button.forget")
    await page.click(f"{row} button.forget")
    await page.click(f"{row} button.confirm-forget")
    await page.wait_for_selector(row, state="detached")
    assert page.errors == []


async def test_dark_mode_and_a_390px_layout(api: Api, browser: Any) -> None:  # noqa: F811
    ARTIFACTS.mkdir(exist_ok=True)
    async with api.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": FAILING})).json()["run_id"]
        await wait_status(c, run_id, "DEAD", "FAILED")
    context = await browser.new_context(viewport=PHONE, color_scheme="dark")
    page = await context.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    await page.goto(f"{api.url}/")
    await page.fill("#api-key", api.keys["acme"])
    await page.click("button[type=submit]")
    await page.wait_for_selector(f"tr[data-run='{run_id}']")
    background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(18, 18, 22)", background
    await no_sideways_scroll(page)
    await page.screenshot(path=str(ARTIFACTS / "console-phone-runs.png"), full_page=True)
    await page.goto(f"{api.url}/ui/#/runs/{run_id}")
    await page.wait_for_selector("#run-cause")
    await no_sideways_scroll(page)
    await page.screenshot(path=str(ARTIFACTS / "console-phone-run.png"), full_page=True)
    for section in ("new", "memory", "knowledge"):
        await page.goto(f"{api.url}/ui/#/{section}")
        await page.wait_for_selector("h1")
        await no_sideways_scroll(page)
    await context.close()
    assert page.errors == [], page.errors
    assert uuid.UUID(run_id)

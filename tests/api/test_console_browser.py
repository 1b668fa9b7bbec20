"""The web console in a real headless Chromium: runs list, a run turning green live, an approval.

Screenshots go to test-artifacts/console-*.png.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from api_helpers import Api, wait_status

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).parents[2] / "test-artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]

playwright_api = pytest.importorskip(
    "playwright.async_api", reason="the browser test needs the playwright package (dev extra)")
if not Path(CHROMIUM).exists():
    pytest.skip("the browser test needs Debian's chromium (apt-get install chromium; "
                "scripts/system-deps.sh installs it)", allow_module_level=True)


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as p:
        chromium = await p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        await chromium.close()


async def open_console(browser: Any, api: Api, tenant: str = "acme") -> Any:
    page = await browser.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    await page.goto(f"{api.url}/")
    await page.fill("#api-key", api.keys[tenant])
    await page.click("button[type=submit]")
    return page


PLAN = {"name": "console approval", "steps": [
    {"id": "slow", "tool": "python", "code": (  # runs until the test has seen it run: 'go'
        "import os, time\ndeadline = time.time() + 8\n"
        "while not os.path.exists('go') and time.time() < deadline:\n    time.sleep(0.05)\n"
        "print('slow done')")},
    {"id": "gate", "kind": "approval", "input": {"prompt": "continue?"}, "depends_on": ["slow"]},
    {"id": "after", "tool": "bash", "code": "echo after approval", "depends_on": ["gate"]},
]}


async def test_runs_list_run_page_live_and_approval(api: Api, browser: Any) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    async with api.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": PLAN})).json()["run_id"]
        other = (await c.post("/v1/runs", json={"plan": {"name": "quick", "steps": [
            {"id": "a", "tool": "bash", "code": "echo quick"}]}})).json()["run_id"]
    page = await open_console(browser, api)
    await page.wait_for_selector(f"tr[data-run='{run_id}']")
    await page.wait_for_selector(f"tr[data-run='{other}']")
    await page.click("button[data-filter=SUCCEEDED]")
    await page.wait_for_selector(f"tr[data-run='{run_id}']", state="detached")
    await page.click("button[data-filter=SUCCEEDED]")
    await page.fill("#run-search", "console")
    await page.wait_for_selector(f"tr[data-run='{other}']", state="detached")
    await page.screenshot(path=str(ARTIFACTS / "console-runs.png"))

    await page.click(f"tr[data-run='{run_id}']")
    node = "#dag g[data-step=slow]"
    await page.wait_for_selector(node)
    assert await page.get_attribute(node, "data-status") != "SUCCESS", "step finished too early"
    workspace = api.rt.backend.workspace(f"run-{run_id}")
    for _ in range(600):  # the step's workspace exists once it has started
        if workspace.exists():
            break
        await asyncio.sleep(0.05)
    (workspace / "go").write_text("")
    await page.wait_for_selector(f"{node}[data-status=SUCCESS]", timeout=30_000)
    color = await page.eval_on_selector(f"{node} rect", "r => getComputedStyle(r).fill")
    assert color == "rgb(31, 157, 85)", color  # --ok green
    await page.wait_for_selector("[data-attempt='slow#1'] a:has-text('⤓')")  # snapshot link

    await page.wait_for_selector("[data-approval=gate]", timeout=30_000)
    assert await page.get_attribute("#dag g[data-step=gate]", "data-status") == "WAITING"
    await page.screenshot(path=str(ARTIFACTS / "console-run-waiting.png"), full_page=True)
    await page.click("#approve-gate")
    await page.wait_for_selector("#dag g[data-step=after][data-status=SUCCESS]", timeout=30_000)
    await page.wait_for_selector("h1 .badge[data-status=SUCCEEDED]", timeout=30_000)
    await page.click("#dag g[data-step=after]")
    await page.wait_for_selector("pre.stdout:has-text('after approval')")
    await page.screenshot(path=str(ARTIFACTS / "console-run-done.png"), full_page=True)
    stray = await page.evaluate("[...document.querySelector('main').childNodes]"
                                ".filter(n => n.nodeType === 3 && n.textContent.trim()).length")
    assert stray == 0, "stray text (e.g. 'null') rendered in the page"
    async with api.client() as c:
        detail = await wait_status(c, run_id, "SUCCEEDED")
    gate = next(s for s in detail["steps"] if s["step_id"] == "gate")
    assert gate["decision"]["approval"]["approved"] is True
    assert page.errors == []


async def test_console_asks_for_a_key_and_hides_other_tenants(api_no_worker: Api,
                                                             browser: Any) -> None:
    async with api_no_worker.client("globex") as g:
        theirs = (await g.post("/v1/runs", json={"plan": PLAN})).json()["run_id"]
    async with api_no_worker.client("acme") as a:
        mine = (await a.post("/v1/runs", json={"plan": PLAN})).json()["run_id"]
    page = await browser.new_page()
    await page.goto(f"{api_no_worker.url}/ui/")
    await page.wait_for_selector("#api-key")
    await page.fill("#api-key", "obx_not-a-real-key")
    await page.click("button[type=submit]")
    await page.wait_for_selector("text=unknown or revoked")
    await page.fill("#api-key", api_no_worker.keys["acme"])
    await page.click("button[type=submit]")
    await page.wait_for_selector(f"tr[data-run='{mine}']")
    assert await page.query_selector(f"tr[data-run='{theirs}']") is None
    await page.goto(f"{api_no_worker.url}/ui/#/runs/{theirs}")
    await page.wait_for_selector(".error-box:has-text('not_found')")


async def test_knowledge_search_and_memory_browser_pages(kapi: Api, browser: Any) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    async with kapi.client() as c:
        await c.post("/v1/knowledge/documents", json={
            "source": "runbook.md", "collection": "ops", "title": "Runbook",
            "text": "Restart the queue worker with onebox worker. Backups run nightly at 02:00."})
        await c.post("/v1/memory", json={"scope": "team", "content": "Ana owns the deploy key."})
        await c.post("/v1/memory", json={"scope": "team", "content": "Standup is at 09:30."})
    page = await open_console(browser, kapi)
    await page.goto(f"{kapi.url}/ui/#/knowledge")
    await page.wait_for_selector("#kb-collection option[value=ops]", state="attached")
    await page.fill("#kb-query", "when do backups run?")
    await page.click("form button[type=submit]")
    await page.wait_for_selector("#kb-results .hit:has-text('nightly at 02:00')")
    await page.screenshot(path=str(ARTIFACTS / "console-knowledge.png"), full_page=True)
    await page.goto(f"{kapi.url}/ui/#/memory")
    await page.wait_for_selector("button[data-scope=team]")
    await page.wait_for_selector("#mem-rows tr:has-text('Ana owns the deploy key.')")
    assert len(await page.query_selector_all("#mem-rows tr")) == 2
    await page.fill("#mem-query", "who owns the deploy key?")
    await page.press("#mem-query", "Enter")
    await page.wait_for_selector(".hit:has-text('Ana owns the deploy key.')")
    await page.screenshot(path=str(ARTIFACTS / "console-memory.png"), full_page=True)
    assert page.errors == []


async def test_plan_versions_after_a_replan_are_shown_as_tabs(api_no_worker: Api,
                                                               browser: Any) -> None:
    import uuid

    from onebox.agent.plan import parse_plan
    from onebox.runtime.engine.submit import create_plan_version

    async with api_no_worker.client() as c:
        submitted = (await c.post("/v1/runs", json={"plan": PLAN})).json()
    replan = parse_plan({"name": "console approval", "steps": [
        {"id": "slow", "tool": "python", "code": "print('slow')"},
        {"id": "fixed", "tool": "bash", "code": "echo fixed", "depends_on": ["slow"]},
    ]})
    async with api_no_worker.rt.db.transaction() as conn:
        await create_plan_version(conn, uuid.UUID(submitted["run_id"]), submitted["trace_id"],
                                  replan, version=2, reason="replanned: gate removed")
    page = await open_console(browser, api_no_worker)
    await page.goto(f"{api_no_worker.url}/ui/#/runs/{submitted['run_id']}")
    await page.wait_for_selector("#dag g[data-step=fixed]")
    assert await page.query_selector("#dag g[data-step=gate]") is None
    await page.click("button[data-version='1']")
    await page.wait_for_selector("#dag g[data-step=gate]")
    assert await page.query_selector("#dag g[data-step=fixed]") is None
    await page.screenshot(path=str(ARTIFACTS / "console-plan-v1.png"), full_page=True)
    assert page.errors == []


async def test_task_run_page_shows_the_task_and_the_agent_decisions(agent_api: Api,
                                                                    browser: Any) -> None:
    intent = {"goal": "say hi", "entities": [], "capabilities": ["bash"], "formats": [],
              "risks": [], "fallbacks": []}
    agent_api.model.add(intent, {"name": "hi", "steps": [
        {"id": "hello", "tool": "bash", "code": "echo hi from the agent"}]})
    async with agent_api.client() as c:
        run_id = (await c.post("/v1/runs", json={"task": "greet me"})).json()["run_id"]
        await wait_status(c, run_id, "SUCCEEDED")
    page = await open_console(browser, agent_api)
    await page.goto(f"{agent_api.url}/ui/#/runs/{run_id}")
    await page.wait_for_selector("#run-task:has-text('greet me')")
    await page.wait_for_selector("#agent-decisions summary:has-text('intent')")
    await page.wait_for_selector("#agent-decisions summary:has-text('plan')")
    await page.click("#agent-decisions details:nth-of-type(2) summary")
    await page.wait_for_selector("#dag g[data-step=hello][data-status=SUCCESS]")
    await page.screenshot(path=str(ARTIFACTS / "console-task-run.png"), full_page=True)
    assert page.errors == []


async def test_a_failed_attempt_shows_its_stderr_not_object_names(api: Api, browser: Any) -> None:
    """A failed step's card showed `[object HTMLHeadingElement],[object HTMLPreElement]`
    where its stderr should be (a nested list of elements was printed as text)."""
    async with api.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": {"name": "fails", "steps": [
            {"id": "bad", "tool": "bash", "code": "echo boom-on-stderr >&2; exit 3",
             "max_attempts": 1}]}})).json()["run_id"]
        await wait_status(c, run_id, "DEAD", "FAILED")
    page = await open_console(browser, api)
    await page.goto(f"{api.url}/ui/#/runs/{run_id}")
    await page.click("#dag g[data-step=bad]")
    await page.wait_for_selector("pre.stderr:has-text('boom-on-stderr')", timeout=15_000)
    text = await page.inner_text("main")
    assert "[object " not in text, text[:2000]
    assert page.errors == []


async def test_fork_from_a_step_then_compare_with_the_parent_and_replay(
        api: Api, browser: Any) -> None:
    plan = {"name": "travel", "steps": [
        {"id": "a", "tool": "bash", "code": "echo a > f.txt"},
        {"id": "b", "tool": "bash", "code": "echo b >> f.txt", "depends_on": ["a"]},
        {"id": "c", "tool": "bash", "code": "cat f.txt", "depends_on": ["b"]}]}
    async with api.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": plan})).json()["run_id"]
        await wait_status(c, run_id, "SUCCEEDED")
    page = await open_console(browser, api)
    await page.goto(f"{api.url}/ui/#/runs/{run_id}")
    await page.click("#dag g[data-step=b]")
    await page.click(".fork-box summary")
    await page.fill("#fork-code-b", "echo B-forked >> f.txt")
    await page.click("#fork-b")
    await page.wait_for_selector("#run-fork", timeout=15_000)  # the fork's own page
    assert run_id in await page.inner_text("#run-fork")
    await page.wait_for_selector("h1 .badge[data-status=SUCCEEDED]", timeout=30_000)
    await page.click("#compare-parent")
    try:
        await page.wait_for_selector("#run-diff [data-step-diff=b][data-same=false]")
    except playwright_api.TimeoutError as timeout:  # say what the page and the API showed
        fork_id = page.url.rsplit("/", 1)[-1]
        async with api.client() as c:
            body = (await c.get(f"/v1/runs/{run_id}/compare/{fork_id}")).text
        raise AssertionError(f"no differing b; the API says {body[:3000]}; page errors "
                             f"{page.errors}; page {(await page.inner_text('main'))[:3000]}") from timeout
    assert await page.get_attribute("#run-diff [data-step-diff=a]", "data-same") == "true"
    assert "+B-forked" in await page.inner_text("#run-diff [data-step-detail=c]")
    await page.click("#replay-run")
    await page.wait_for_selector("#replay-report [data-replay=c][data-match=true]",
                                 timeout=30_000)
    assert "0 model calls made" in await page.inner_text("#replay-report")
    await page.screenshot(path=str(ARTIFACTS / "console-time-travel.png"), full_page=True)
    assert page.errors == []


async def test_fork_a_task_run_from_a_step_with_another_profile(agent_api: Api,
                                                                browser: Any) -> None:
    intent = {"goal": "double", "entities": [], "capabilities": ["python"], "formats": [],
              "risks": [], "fallbacks": []}
    agent_api.model.add(intent, {"name": "double", "steps": [
        {"id": "write", "tool": "bash", "code": "echo 4 > n.txt"},
        {"id": "double", "tool": "python", "goal": "print twice the number in n.txt",
         "depends_on": ["write"]},
        {"id": "answer", "kind": "final", "depends_on": ["double"],
         "input": {"answer": "{{ double.stdout }}"}}]},
        {"code": "print(int(open('n.txt').read()) * 2)"})
    async with agent_api.client() as c:
        assert (await c.put("/v1/profiles/again", json={"model": "scripted"})).status_code \
            in (200, 201)
        run_id = (await c.post("/v1/runs", json={"task": "double it"})).json()["run_id"]
        await wait_status(c, run_id, "SUCCEEDED")
    agent_api.model.add({"code": "print(int(open('n.txt').read()) * 3)"})
    page = await open_console(browser, agent_api)
    await page.goto(f"{agent_api.url}/ui/#/runs/{run_id}")
    await page.click("#dag g[data-step=double]")
    await page.click(".fork-box summary")
    await page.wait_for_selector("#fork-profile-double option[value=again]", state="attached")
    await page.select_option("#fork-profile-double", "again")
    await page.click("#fork-double")
    await page.wait_for_selector("#run-fork:has-text('with profile again')", timeout=15_000)
    await page.wait_for_selector("h1 .badge[data-status=SUCCEEDED]", timeout=30_000)
    assert "12" in await page.inner_text("#answer, .answer, main")
    await page.click("#compare-parent")
    await page.wait_for_selector("#run-diff [data-step-diff=double][data-same=false]")
    assert await page.get_attribute("#run-diff [data-step-diff=write]", "data-same") == "true"
    await page.screenshot(path=str(ARTIFACTS / "console-task-fork.png"), full_page=True)
    assert page.errors == []

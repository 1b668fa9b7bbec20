"""Threads in the console, in a real headless Chromium: start a thread, send a message and
watch the turn live, its steps and files, the memories that fed the next turn (taken by the
turn's upkeep with the scripted model), no HTML from model or user text, and
a 390 px dark layout.

Screenshots go to test-artifacts/console-thread*.png.
"""

from __future__ import annotations

from typing import Any

from api_helpers import Api
from test_console_actions import PHONE, no_sideways_scroll
from test_console_browser import ARTIFACTS, browser, open_console  # noqa: F401 (fixture)

INTENT = {"goal": "keep a note", "entities": [], "capabilities": ["python"], "formats": [],
          "risks": [], "fallbacks": []}
INJECTED = "<img src=x onerror=\"window.pwned=1\"><b>saved</b>"
SAVE = {"name": "save", "steps": [
    {"id": "save", "tool": "python",
     "code": "import time; time.sleep(4); open('notes.txt', 'w').write('4417'); print('kept 4417')"},
    {"id": "answer", "kind": "final", "depends_on": ["save"], "input": {"answer": INJECTED}}]}
READ = {"name": "read", "steps": [
    {"id": "read", "tool": "python", "code": "print(open('notes.txt').read())"},
    {"id": "answer", "kind": "final", "depends_on": ["read"],
     "input": {"answer": "the code is {{ read.stdout }}"}}]}
FACT = "The launch code 4417 is kept in the file notes.txt."
SUMMARY = {"summary": "The user keeps a launch code in notes.txt."}
MESSAGE = "keep the launch code 4417 in a file <script>window.pwned=1</script>"


async def send(page: Any, text: str) -> None:
    await page.fill("#thread-message", text)
    await page.click("#thread-send")


async def test_a_conversation_in_the_console(agent_api: Api, browser: Any) -> None:  # noqa: F811
    ARTIFACTS.mkdir(exist_ok=True)
    agent_api.model.add(INTENT, SAVE, {"facts": [FACT]}, SUMMARY)
    page = await open_console(browser, agent_api)
    await page.click("header a[data-nav=threads]")
    await page.click("#thread-create")
    await page.wait_for_selector("#thread-id")
    thread_id = await page.text_content("#thread-id")
    await send(page, MESSAGE)
    await page.wait_for_selector("#thread-send:disabled")  # the turn runs; the form waits
    await page.wait_for_selector("[data-turn='1'] .badge[data-status=RUNNING]", timeout=30_000)
    await page.wait_for_selector("[data-turn='1'] .badge[data-status=SUCCEEDED]", timeout=60_000)
    await page.wait_for_selector("#thread-live:has-text('run_succeeded')")
    assert await page.text_content("[data-turn='1'] .turn-message") == MESSAGE
    assert await page.text_content("[data-turn='1'] .turn-answer") == INJECTED
    await page.wait_for_selector("[data-turn='1'] .turn-file[data-file='notes.txt']")
    await page.click("[data-turn='1'] .turn-steps summary")
    await page.wait_for_selector("[data-turn='1'] [data-step=save] pre.stdout:has-text('kept 4417')")
    assert await page.evaluate("window.pwned") is None
    assert await page.query_selector("#turns img, #turns script, #turns b:has-text('saved')") is None

    agent_api.model.add(INTENT, READ, {"facts": []}, SUMMARY)
    await send(page, "which launch code did I give you?")
    await page.wait_for_selector("[data-turn='2'] .badge[data-status=SUCCEEDED]", timeout=60_000)
    await page.wait_for_selector("[data-turn='2'] .turn-answer:has-text('the code is 4417')")
    await page.click("[data-turn='2'] .turn-context summary")
    memory = "[data-turn='2'] .context-memories li .memory-content"
    await page.wait_for_selector(f"{memory}:has-text('{FACT}')")
    tokens = await page.text_content("[data-turn='2'] .context-tokens")
    assert tokens is not None and "memories" in tokens and "summary v1" in tokens
    await page.wait_for_selector("#thread-summary:has-text('launch code in notes.txt')")
    await page.screenshot(path=str(ARTIFACTS / "console-thread.png"), full_page=True)

    await page.click("a[href='#/threads']")
    await page.wait_for_selector(f"tr[data-thread='{thread_id}'] td.num:has-text('2')")

    # fork at turn 2, asked in other words: a new thread with turn 1 kept and turn 2 anew
    agent_api.model.add(INTENT, READ, {"facts": []}, SUMMARY)
    await page.click(f"tr[data-thread='{thread_id}']")
    await page.click("[data-fork-turn='2'] summary")
    await page.fill("#fork-turn-message-2", "what was the code again?")
    await page.click("#fork-turn-2")
    await page.wait_for_selector(f"#thread-forked-from:has-text('{thread_id}')")
    assert "at turn 2" in await page.inner_text("#thread-forked-from")
    await page.wait_for_selector("[data-turn='2'] .turn-answer:has-text('the code is 4417')",
                                 timeout=60_000)
    assert await page.text_content("[data-turn='2'] .turn-message") == "what was the code again?"
    assert await page.text_content("[data-turn='1'] .turn-message") == MESSAGE
    assert page.errors == [], page.errors


async def test_a_busy_thread_refuses_clearly_at_390px_dark(api_no_worker: Api,
                                                          browser: Any) -> None:  # noqa: F811
    """No worker: turn 1 stays queued, so the page waits for it (the form disabled, saying
    why) until it ends; a turn posted elsewhere meanwhile makes a message a 409, shown."""
    ARTIFACTS.mkdir(exist_ok=True)
    async with api_no_worker.client() as c:
        made = (await c.post("/v1/threads", json={"title": "<i>phone</i>"})).json()
        r = await c.post(f"/v1/threads/{made['id']}/messages", json={"message": "first <u>turn</u>"})
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
    context = await browser.new_context(viewport=PHONE, color_scheme="dark")
    page = await context.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    await page.goto(f"{api_no_worker.url}/")
    await page.fill("#api-key", api_no_worker.keys["acme"])
    await page.click("button[type=submit]")
    await page.goto(f"{api_no_worker.url}/ui/#/threads")
    await page.wait_for_selector(f"tr[data-thread='{made['id']}']:has-text('<i>phone</i>')")
    await no_sideways_scroll(page)
    await page.click(f"tr[data-thread='{made['id']}']")
    await page.wait_for_selector(f"[data-turn='1'] a[href='#/runs/{run_id}']")
    assert await page.text_content("[data-turn='1'] .turn-message") == "first <u>turn</u>"
    await page.wait_for_selector("#thread-send:disabled")  # turn 1 has not ended: it waits
    await page.wait_for_selector("#thread-live:has-text('turn 1 is still running')")
    async with api_no_worker.client() as c:
        assert (await c.post(f"/v1/runs/{run_id}/cancel")).status_code in (200, 202)
    await page.wait_for_selector("#thread-send:not(:disabled)", timeout=30_000)  # it ended
    await page.wait_for_selector("#thread-live:has-text('turn 1 has ended')")
    await page.wait_for_selector("[data-turn='1'] .badge[data-status=CANCELLED]")
    async with api_no_worker.client() as c:  # a turn from another client the page missed
        r = await c.post(f"/v1/threads/{made['id']}/messages", json={"message": "elsewhere"})
        assert r.status_code == 201, r.text
    await page.fill("#thread-message", "   ")
    await page.click("#thread-send")  # blank: nothing is sent
    await send(page, "a second message while the first still waits")
    await page.wait_for_selector("#thread-send-result .error-box:has-text('still running')")
    value = await page.input_value("#thread-message")
    assert value == "a second message while the first still waits"  # kept to send again
    turns = [await t.text_content() for t in await page.query_selector_all("[data-turn]")]
    assert not [t for t in turns if "a second message while the first" in (t or "")], turns
    assert await page.query_selector("#view i, #view u") is None
    background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(18, 18, 22)", background
    await no_sideways_scroll(page)
    await page.screenshot(path=str(ARTIFACTS / "console-thread-phone.png"), full_page=True)
    await page.goto(f"{api_no_worker.url}/ui/#/threads/00000000-0000-0000-0000-000000000000")
    await page.wait_for_selector(".error-box:has-text('not_found')")
    await context.close()
    assert page.errors == [], page.errors

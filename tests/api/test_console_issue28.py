"""Issue 28 in the console, in a real headless Chromium at 1280 and 390 px wide: a task
started from New run with a stored profile, the error a task without a model gets, the
runs list's error on a phone, the plan graph's final node, a running step's elapsed time,
knowledge documents without host paths.

One server (its own database clone, a worker with no process-wide model, an operator-declared
provider answering from a script) and one browser serve the whole module.
Screenshots go to test-artifacts/console-i28-*.png.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from api_helpers import serving, wait_status
from pydantic import SecretStr

from onebox.api import create_app
from onebox.config import ProviderSettings, Settings, load_settings
from onebox.llm.embedding import EmbeddingModel
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services.api_keys import create_key
from onebox.runtime.services.service import Runtime
from onebox.store.db import Database
from onebox.testing import ScriptedOpenAIServer, ServerReply

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).parents[2] / "test-artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
WIDE, PHONE = {"width": 1280, "height": 900}, {"width": 390, "height": 844}
ONEBOX = str(Path(sys.executable).with_name("onebox"))

playwright_api = pytest.importorskip(
    "playwright.async_api", reason="the browser test needs the playwright package (dev extra)")
if not Path(CHROMIUM).exists():
    pytest.skip("the browser test needs Debian's chromium (apt-get install chromium; "
                "scripts/system-deps.sh installs it)", allow_module_level=True)

INTENT = {"goal": "greet", "entities": [], "capabilities": ["bash"], "formats": [],
          "risks": [], "fallbacks": []}
GREET = {"name": "greet", "steps": [
    {"id": "hello", "tool": "bash", "code": "echo hello from the profile model"},
    {"id": "answer", "kind": "final", "depends_on": ["hello"],
     "input": {"answer": "{{ hello.stdout }}"}}]}


@dataclass
class World:
    url: str
    rt: Runtime
    keys: dict[str, str]
    llm: ScriptedOpenAIServer
    settings: Settings

    async def post(self, path: str, body: dict[str, Any], tenant: str = "acme") -> Any:
        async with self.client(tenant) as c:
            return await c.post(path, json=body)

    def client(self, tenant: str = "acme") -> Any:
        import httpx

        return httpx.AsyncClient(base_url=self.url, timeout=30,
                                 headers={"Authorization": f"Bearer {self.keys[tenant]}"})


@pytest.fixture(scope="module")
def module_db_url(pg_server_url: str, template_url: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "onebox_template"')
    info = psycopg.conninfo.conninfo_to_dict(pg_server_url)
    info["dbname"] = name
    yield psycopg.conninfo.make_conninfo(**{k: v for k, v in info.items() if v is not None})
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
async def world(module_db_url: str, e5: EmbeddingModel,
                unmount_below: Callable[[Path], None]) -> AsyncIterator[World]:
    """The API and a worker over one database; no process-wide model (the configuration docs'
    recommended setup): task runs name a stored profile of provider `scripted`."""
    from onebox.sandbox.registry import get_backend

    home = Path(tempfile.mkdtemp(prefix="onebox-i28-console-"))
    home.chmod(0o755)
    settings = load_settings(home=home / "home")
    settings.database_url = SecretStr(module_db_url)
    settings.llm.model = settings.llm.base_url = settings.llm.api_key = None
    settings.runtime.poll_s, settings.runtime.heartbeat_s = 0.1, 0.2
    settings.api.events_poll_s = 0.05
    with ScriptedOpenAIServer() as llm:
        settings.providers = [ProviderSettings(name="scripted", base_url=llm.base_url)]
        db = await Database.open(settings)
        backend = get_backend(settings)
        rt = Runtime(settings, db, backend)
        keys = {t: (await create_key(db, tenant_id=t, name=f"{t}-test"))[0]
                for t in ("acme", "default")}
        stop = asyncio.Event()
        worker = Worker(db, backend, settings, objects=rt.objects)
        runner = asyncio.create_task(worker.serve(stop, drain_s=2))
        try:
            async with serving(create_app(settings, runtime=rt, embedding=e5)) as url:
                yield World(url, rt, keys, llm, settings)
        finally:
            stop.set()
            await runner
            await backend.close()
            await rt.objects.close()
            await db.close()
            unmount_below(home)
            shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
async def chromium() -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        await browser.close()


async def console(chromium: Any, world: World, tenant: str = "acme", hash_: str = "") -> Any:
    page = await chromium.new_page(viewport=WIDE)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    await page.goto(f"{world.url}/")
    await page.evaluate("k => localStorage.setItem('onebox.api_key', k)", world.keys[tenant])
    await page.goto(f"{world.url}/#/{hash_}")
    return page


async def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"console-i28-{name}.png"), full_page=True)


async def within_width(page: Any, selector: str) -> dict[str, float]:
    """The element is shown and lies inside the viewport's width (not scrolled off). Found
    and measured in one task of the page: a run page is drawn again on every event of its
    run, and an element found by one call can be detached by the next (its box was then
    empty)."""
    found = await page.wait_for_function(
        "sel => { const e = document.querySelector(sel);"
        " if (!e || !e.checkVisibility()) return null; const r = e.getBoundingClientRect();"
        " return r.width > 0 && r.height > 0 ? {x: r.x, width: r.width} : null; }",
        arg=selector, timeout=10_000)  # the query and the box in one task: no redraw between
    box = await found.json_value()
    width = page.viewport_size["width"]
    assert box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, (selector, box, width)
    return box


async def test_a_task_from_the_console_runs_with_the_profile_picked(
        world: World, chromium: Any) -> None:
    """Point 2: New run -> Task offers the tenant's stored profiles (the first one picked),
    and the run's model calls go to that profile's model. Point 11b: the plan's `final` node
    shows succeeded on the SUCCEEDED run."""
    async with world.client() as c:
        for name in ("kimi", "other"):
            made = await c.put(f"/v1/profiles/{name}", json={"provider": "scripted",
                                                               "model": f"{name}-model"})
            assert made.status_code == 200, made.text
    world.llm.add(ServerReply.json(INTENT), ServerReply.json(GREET))
    before = len(world.llm.requests)
    page = await console(chromium, world, hash_="new")
    await page.wait_for_selector("#new-profile option[value=kimi]", state="attached")
    assert await page.eval_on_selector("#new-profile", "s => s.value") == "kimi"
    await within_width(page, "#new-profile")
    await page.set_viewport_size(PHONE)
    await within_width(page, "#new-profile")
    await shot(page, "new-task-profile-390")
    await page.set_viewport_size(WIDE)
    await page.fill("#new-text", "greet me")
    await page.click("#new-submit")
    await page.wait_for_url("**/#/runs/*")
    run_id = page.url.rsplit("/", 1)[-1]
    async with world.client() as c:
        detail = await wait_status(c, run_id, "SUCCEEDED", "FAILED", "DEAD", "WAITING")
    assert detail["run"]["status"] == "SUCCEEDED", [
        (s["step_id"], s["status"], (s["stderr"] or s["error"] or "")[:300]) for s in detail["steps"]]
    assert detail["run"]["profile"]["model"] == "kimi-model"
    await page.wait_for_selector("h1 .badge[data-status=SUCCEEDED]")
    models = {r["model"] for r in world.llm.requests[before:]}
    assert models == {"kimi-model"}, models
    final = "#dag g[data-step=answer]"
    for size in (WIDE, PHONE):
        await page.set_viewport_size(size)
        await page.wait_for_selector(f"{final}[data-status=SUCCESS]")
        await page.wait_for_function(  # --ok green, not the grey of NOT_STARTED (live events
            "sel => { const r = document.querySelector(sel); "  # may redraw the graph)
            "return r !== null && getComputedStyle(r).fill === 'rgb(31, 157, 85)'; }",
            arg=f"{final} rect")
    await shot(page, "task-with-profile")
    assert page.errors == []


async def test_a_task_without_profile_or_model_names_both_fixes(world: World) -> None:
    """Point 2: the API's llm_not_configured error says how to pick a profile and how to
    configure a process-wide model."""
    refused = await world.post("/v1/runs", {"task": "greet me"})
    assert refused.status_code == 503, refused.text
    body = refused.json()
    assert body["code"] == "llm_not_configured" and body["field"] == "task"
    for fix in ("--profile NAME", '"profile"', "onebox profile list", "ONEBOX_LLM__MODEL",
                "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        assert fix in body["message"], (fix, body["message"])


def test_the_cli_task_without_profile_or_model_names_both_fixes(tmp_path: Path) -> None:
    """Point 2, the same error from `onebox run "<task>"` (refused before any database)."""
    drop = ("DATABASE_URL", "ONEBOX_DATABASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY",
            "ONEBOX_LLM__MODEL")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    ran = subprocess.run([ONEBOX, "run", "say hello"], capture_output=True, text=True,
                         env={**env, "ONEBOX_HOME": str(tmp_path), "COLUMNS": "200"}, timeout=60)
    assert ran.returncode == 2, ran.stderr
    for fix in ("--profile NAME", "onebox profile list", "ONEBOX_LLM__MODEL"):
        assert fix in ran.stderr, (fix, ran.stderr)
    assert "Traceback" not in ran.stderr


async def test_the_runs_list_shows_the_error_on_a_phone(world: World, chromium: Any) -> None:
    """Point 11a: at 390 px the error of a failed run is on screen (a card per run), not in
    a column scrolled off to the right."""
    made = await world.post("/v1/runs", {"plan": {"name": "breaks", "steps": [
        {"id": "bad", "tool": "bash", "code": "exit 3", "max_attempts": 1}]}})
    run_id = made.json()["run_id"]
    async with world.client() as c:
        error = (await wait_status(c, run_id, "FAILED", "DEAD"))["run"]["error"]
    assert error
    page = await console(chromium, world, hash_="runs")
    cell = f"tr[data-run='{run_id}'] td.run-error"
    for size, name in ((WIDE, "runs-1280"), (PHONE, "runs-390")):
        await page.set_viewport_size(size)
        await page.wait_for_selector(cell)
        await within_width(page, cell)
        await within_width(page, f"tr[data-run='{run_id}'] .badge")
        assert error[:60] in await page.inner_text(cell)
        await shot(page, name)
    assert page.errors == []


WAIT_FOR_GO = ("import os, time\ndeadline = time.time() + 60\n"
               "while not os.path.exists('go') and time.time() < deadline:\n    time.sleep(0.05)\n"
               "print('went')")


async def test_a_running_step_shows_its_elapsed_time_ticking(world: World, chromium: Any) -> None:
    """Point 11c: a RUNNING step's card and timeline row show the time since it started,
    redrawn as it runs; once it ends, its duration."""
    made = await world.post("/v1/runs", {"plan": {"name": "ticks", "steps": [
        {"id": "wait", "tool": "python", "code": WAIT_FOR_GO}]}})
    run_id = made.json()["run_id"]
    page = await console(chromium, world, hash_=f"runs/{run_id}")
    await page.wait_for_selector("#dag g[data-step=wait][data-status=RUNNING]", timeout=60_000)
    await page.click("#dag g[data-step=wait]")
    card, row = "[data-attempt='wait#1'] .elapsed", "[data-timeline=wait] .elapsed"
    for size in (WIDE, PHONE):
        await page.set_viewport_size(size)
        await within_width(page, card)
        await within_width(page, row)
        shown = await page.inner_text(card)
        assert shown.endswith(" s"), shown
        await page.wait_for_function("([sel, was]) => { const e = document.querySelector(sel);"
                                     " return e !== null && e.textContent !== was; }",
                                     arg=[card, shown])  # it ticks (across redraws)
    await shot(page, "elapsed-390")
    workspace = world.rt.backend.workspace(f"run-{run_id}")
    (workspace / "go").write_text("")
    await page.wait_for_selector("#dag g[data-step=wait][data-status=SUCCESS]", timeout=30_000)
    await page.wait_for_selector(card, state="detached")
    assert page.errors == []


async def kb_cli(world: World, *args: str) -> tuple[int, Any]:
    """`onebox kb ...` as the host's operator runs it (tenant default), on this database."""
    import json

    from click.testing import CliRunner

    from onebox.cli.main import main

    assert world.settings.database_url is not None
    env = {"ONEBOX_HOME": str(world.settings.home), "ONEBOX_SANDBOX__BACKEND": "process",
           "ONEBOX_DATABASE_URL": world.settings.database_url.get_secret_value()}
    result = await asyncio.to_thread(CliRunner().invoke, main, ["kb", *args, "--json"], env=env)
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else None


async def test_knowledge_documents_show_names_not_host_paths(world: World, chromium: Any,
                                                              tmp_path: Path) -> None:
    """Point 11d: `kb add /abs/path/runbook.md` is stored, listed and searched as
    `runbook.md` (a folder's files as `notes/sub/deploy.md`); no host path reaches the
    tenant's API or the console; `kb remove` takes the path or the name."""
    (tmp_path / "notes" / "sub").mkdir(parents=True)
    (tmp_path / "runbook.md").write_text("Backups run nightly at 02:00.")
    (tmp_path / "notes" / "sub" / "deploy.md").write_text("Ana owns the deploy key.")
    code, added = await kb_cli(world, "add", str(tmp_path / "runbook.md"),
                               str(tmp_path / "notes"), "-c", "ops")
    assert code == 0, added
    async with world.client("default") as c:
        listed = await c.get("/v1/knowledge/documents")
        hits = await c.post("/v1/knowledge/search", json={"query": "when do backups run?"})
    assert sorted(d["source"] for d in listed.json()["documents"]) == [
        "notes/sub/deploy.md", "runbook.md"]
    assert hits.json()["hits"][0]["document"]["source"] == "runbook.md"
    for shown in (listed.text, hits.text, str(added)):
        assert str(tmp_path) not in shown, shown
    page = await console(chromium, world, tenant="default", hash_="knowledge")
    for size, name in ((WIDE, "knowledge-1280"), (PHONE, "knowledge-390")):
        await page.set_viewport_size(size)
        await page.wait_for_selector("td:text-is('runbook.md')")
        await page.wait_for_selector("td:text-is('notes/sub/deploy.md')")
        assert str(tmp_path) not in await page.inner_text("main")
        await shot(page, name)
    assert page.errors == []
    code, removed = await kb_cli(world, "remove", str(tmp_path / "runbook.md"),
                                 "notes/sub/deploy.md", "-c", "ops")
    assert code == 0 and all(removed["removed"].values()), removed

"""Performing the agent's actions on a worker: model calls, code checks, tool lookups,
sandboxed code, knowledge and memory.

Each action is a claimed ``task_execution`` row (see :mod:`onebox.runtime.agent.engine`);
a step instance's ``step_id`` is the instance (``each[2]`` in a fan-out). The worker
archives the outcome and the agent's observation in one transaction.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from onebox.agent.actions import (
    Action,
    CallModel,
    CheckCode,
    CheckResult,
    ExecuteStep,
    LookupTools,
    ModelReply,
    ReadDocument,
    Recall,
    Remember,
    SearchKnowledge,
    StepAction,
    StepResult,
)
from onebox.agent.hashing import canonical_hash
from onebox.agent.plan import Step, document_file
from onebox.bounds import MAX_DOCUMENTS_BYTES, MAX_READ_BYTES
from onebox.errors import ConfigError, OneboxError, ProviderError
from onebox.knowledge.collections import list_collections, tenant_name, tenant_visible
from onebox.knowledge.documents import read_document
from onebox.knowledge.search import SearchFilters
from onebox.llm.base import ChatModel, ChatResponse
from onebox.llm.registry import price_table
from onebox.model_calls import call_model
from onebox.runtime.agent.engine import replay
from onebox.runtime.agent.tools import expand_tool_step, lookup_tools
from onebox.runtime.engine.archive import Outcome
from onebox.runtime.engine.executor import StepRunner
from onebox.runtime.engine.kinds import Performed
from onebox.runtime.engine.sessions import touch_session
from onebox.runtime.engine.step_context import sandbox_facts, with_catalog_names, workspace_listing
from onebox.runtime.engine.submit import run_session_id
from onebox.runtime.environments import service as environments
from onebox.runtime.models.profiles import allowed_tools, with_instructions, with_profile_defaults
from onebox.sandbox import hostfs
from onebox.sandbox.base import ExecRequest
from onebox.sandbox.capture import safe_text
from onebox.store import catalog
from onebox.store import runs as store
from onebox.store.db import Database

IO_DIR = ".onebox"
DOCUMENTS_FIX = (f"a step's documents hold at most {MAX_READ_BYTES} bytes each and "
                 f"{MAX_DOCUMENTS_BYTES} together; give a larger file to the run instead "
                 "(`onebox run ... --file FILE`, or `files` of POST /v1/runs)")
MAX_RESULT_BYTES = 8 << 20  # a $ONEBOX_RESULT file larger than this is ignored
log = logging.getLogger(__name__)


class AgentWork:
    """Performs one claimed agent action and returns the agent's observation of it.

    The action is found by rebuilding the run's agent from its log (the row carries the
    action's id), so any worker can perform any action of any run. A model call already
    recorded in ``llm_calls`` (its worker died before archiving) is not made again.
    """

    def __init__(self, db: Database, runner: StepRunner,
                 model: Callable[[Mapping[str, Any] | None], ChatModel]) -> None:
        self.db, self.runner, self.model = db, runner, model
        self.backend, self.settings = runner.backend, runner.settings

    async def perform(self, row: store.Row) -> Performed:
        async with self.db.connection() as conn:
            run = await store.fetch_one(conn, "get_run", {"run_id": row["run_id"]})
            assert run is not None
            action = (await replay(conn, run, **await self._context(row))).waiting(
                row["details"]["action_id"])
            if isinstance(action, CheckCode | ExecuteStep):  # the run's end releases it
                await touch_session(conn, row["session_id"], row["run_id"], self.backend.name)
        if action is None:
            return Performed(None, Outcome("FAILED", error="the agent no longer waits for "
                                           "this action (it was observed already)"))
        try:
            return await self._perform(run, row, action)
        except OneboxError as exc:
            outcome = Outcome("FAILED", error=f"{exc.code}: {exc.message}")
            if isinstance(action, StepAction):
                return Performed(StepResult(action.id, ok=False, error=outcome.error), outcome)
            final = isinstance(exc, ConfigError)  # no model configured: retrying cannot help
            return Performed(None, dataclasses.replace(outcome, details={
                "final": final, "provider": isinstance(exc, ProviderError)}))

    async def _context(self, row: store.Row) -> dict[str, Any]:
        """What the agent's prompts state about the sandbox: measured here, at the time the
        action is performed (a model call writing code sees the workspace as it is now)."""
        if row["tool_name"] != "model":
            return {}
        session = row["session_id"]
        if self.runner.workspaces is not None:  # a new workspace gets the run's inputs first
            await self.runner.workspaces.prepare(row)
        facts = await environments.with_run_packages(
            self.db, self.settings, row["run_id"], await sandbox_facts(self.backend, session))
        return {"facts": facts,
                "files": await workspace_listing(self.backend.workspace(session))}

    async def _perform(self, run: store.Row, row: store.Row, action: Action) -> Performed:
        if isinstance(action, CallModel):
            return await self._model_call(run, action)
        if isinstance(action, CheckCode):
            return await self._check(run, action)
        if isinstance(action, LookupTools):
            async with self.db.connection() as conn:
                found = allowed_tools(await with_catalog_names(conn, await lookup_tools(
                    conn, action)), run["profile"])
            return Performed(found, _json_outcome({"tools": [t.name for t in found.tools]}))
        if isinstance(action, ExecuteStep):
            result, outcome = await self._execute(action, row, run)
        elif isinstance(action, StepAction):
            result, outcome = await self._knowledge_step(run, action)
        else:
            raise AssertionError(f"{action.type} is not performed by a worker")
        return Performed(result, outcome)

    async def _model_call(self, run: store.Row, action: CallModel) -> Performed:
        async with self.db.connection() as conn:
            recorded = await store.fetch_one(conn, "recorded_model_reply", {
                "run_id": run["id"], "action_id": action.id})
        if recorded is not None:
            reply = ModelReply(action.id, ChatResponse.from_dict(recorded["response"]))
        else:
            sent = dataclasses.replace(action, request=with_instructions(action.request,
                                                                         run["profile"]))
            reply = await call_model(self.db, self.model(run["profile"]), sent, run_id=run["id"],
                                     prices=price_table(self.settings.llm))
        text = reply.response.content or ""
        return Performed(reply, Outcome("SUCCESS", exit_code=0, stdout=text[-64_000:],
                                        output_hash=canonical_hash({"reply": text})))

    async def _check(self, run: store.Row, action: CheckCode) -> Performed:
        argv = ("bash", "-n", "/dev/stdin") if action.language == "bash" \
            else ("node", "--check", "/dev/stdin")
        result = await self.backend.execute(ExecRequest(
            session_id=run_session_id(run), argv=argv, stdin=action.code.encode(),
            trace_id=run["trace_id"]))
        text = (result.stderr or result.stdout).strip()[:2000]
        return Performed(CheckResult(action.id, result.ok, text),
                         Outcome("SUCCESS", exit_code=result.exit_code, stdout=text,
                                 output_hash=canonical_hash({"ok": result.ok, "text": text})))

    async def _execute(self, action: ExecuteStep, row: store.Row,
                       run: store.Row) -> tuple[StepResult, Outcome]:
        """The step through the one step pipeline, its inputs in ``$ONEBOX_INPUTS`` and the
        JSON result it declares read back from ``$ONEBOX_RESULT``."""
        step = with_profile_defaults(await self._runnable(action.step), run["profile"])
        key = action.instance.replace("/", "_")
        inputs_path, result_path = f"{IO_DIR}/{key}.inputs.json", f"{IO_DIR}/{key}.result.json"
        files = {inputs_path: json.dumps(action.inputs, default=str).encode(),
                 **await self._documents(run["tenant_id"], step)}
        ran = await self.runner.run(
            step, row, files=files,
            env={"ONEBOX_INPUTS": f"/workspace/{inputs_path}",
                 "ONEBOX_RESULT": f"/workspace/{result_path}"})
        outcome, result = ran.outcome, ran.result
        if result is None:
            return StepResult(action.id, ok=False, error=outcome.error), outcome
        declared = await asyncio.to_thread(
            _read_json, self.backend.workspace(row["session_id"]), result_path)
        written = [f for f in result.files_written if not f.path.startswith(IO_DIR)]
        return StepResult(
            action.id, ok=outcome.status == "SUCCESS", exit_code=result.exit_code,
            stdout=result.stdout, stderr=result.stderr, result=declared,
            files=tuple(f.path for f in written),
            error=None if outcome.status == "SUCCESS" else outcome.error,
            timed_out=result.timed_out, duration_ms=result.duration_ms,
            file_bytes=tuple(f.size for f in written)), outcome

    async def _documents(self, tenant: str, step: Step) -> dict[str, bytes]:
        """The knowledge documents the step names, whole, by their workspace path: read
        fresh for every attempt, only among the collections the run's tenant may read."""
        if not step.documents:
            return {}
        names = await self._collections(tenant)
        files, left = {}, MAX_DOCUMENTS_BYTES
        for name in step.documents:
            doc = await read_document(self.db, name, names, max(1, min(MAX_READ_BYTES, left)),
                                      oversize_fix=DOCUMENTS_FIX)
            files[document_file(name)] = data = doc.text.encode()
            left -= len(data)
        return files

    async def _runnable(self, step: Step) -> Step:
        """The code step the sandbox runs for a code, tool or http step."""
        if step.kind == "tool":
            async with self.db.connection() as conn:
                tool = await catalog.get_tool(conn, str(step.input["name"]))
            return expand_tool_step(tool, step)
        if step.kind == "http":
            return step.model_copy(update={"kind": "code", "tool": "python",
                                           "code": _http_code(step.input)})
        return step

    async def _knowledge_step(self, run: store.Row,
                              action: StepAction) -> tuple[StepResult, Outcome]:
        tenant = run["tenant_id"]
        if isinstance(action, ReadDocument):
            return await self._read_document(tenant, action)
        k = await self.runner.knowledge.knowledge()
        scope = tenant_name(tenant, getattr(action, "scope", None)
                            or (run["profile"] or {}).get("memory_scope") or "default")
        result: Any
        if isinstance(action, SearchKnowledge):
            names = await self._collections(tenant)
            hits = await k.search(action.query, action.top_k, SearchFilters(collections=names)) \
                if names else []
            result = [h.to_dict() for h in hits]
        elif isinstance(action, Remember):
            result = await k.memory.remember(scope, action.text)
        elif isinstance(action, Recall):
            recalled = await k.memory.recall(scope, action.query, action.top_k)
            result = [h.to_dict() for h in recalled]
        else:
            raise AssertionError(f"not a knowledge action: {action.type}")
        text = json.dumps(result, default=str, ensure_ascii=False)
        outcome = _json_outcome(json.loads(text), text)
        return StepResult(action.id, ok=True, exit_code=0, stdout=text, result=result), outcome

    async def _collections(self, tenant: str, name: str | None = None) -> list[str]:
        """The knowledge collections a run of ``tenant`` may read (only ``name`` if given)."""
        wanted = tenant_name(tenant, name) if name else None
        return [c["name"] for c in await list_collections(self.db)
                if tenant_visible(c["name"], tenant) and wanted in (None, c["name"])]

    async def _read_document(self, tenant: str,
                             action: ReadDocument) -> tuple[StepResult, Outcome]:
        """The whole document as the step's result (no embedding model needed); the row's
        stdout shows its metadata, the text is in the result only."""
        doc = await read_document(self.db, action.document,
                                  await self._collections(tenant, action.collection),
                                  action.max_bytes)
        result = doc.to_dict()
        about = {k: v for k, v in result.items() if k != "text"}
        outcome = dataclasses.replace(_json_outcome(about),
                                      output_hash=canonical_hash({"result": result}))
        return StepResult(action.id, ok=True, exit_code=0, result=result), outcome


def _json_outcome(value: Any, text: str | None = None) -> Outcome:
    text = json.dumps(value, default=str, ensure_ascii=False) if text is None else text
    return Outcome("SUCCESS", exit_code=0, stdout=text[-64_000:],
                   output_hash=canonical_hash({"result": value}))


def _read_json(workspace: Path, rel: str) -> Any:
    """The result a step declared in ``$ONEBOX_RESULT``, or None. Read through the workspace
    root's fd: a symlink on any component, a FIFO, a device, or a file over
    ``MAX_RESULT_BYTES`` is refused before a byte is read."""
    try:
        with hostfs.root(workspace) as root_fd:
            data = hostfs.read_bounded(root_fd, rel, MAX_RESULT_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("step result %s ignored: %s", rel, exc)
        return None
    try:
        return _storable(json.loads(data))
    except (ValueError, RecursionError):
        return None


def _storable(value: Any) -> Any:
    """The declared result with every string jsonb can store (no NUL, no lone surrogate):
    it becomes part of the agent's observation event. Walked without recursion."""
    if isinstance(value, str):
        return safe_text(value)
    if not isinstance(value, dict | list):
        return value
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in list(items):
            if isinstance(item, str):
                node[key] = safe_text(item)
            elif isinstance(item, dict | list):
                stack.append(item)
        if isinstance(node, dict) and any(isinstance(k, str) and safe_text(k) != k for k in node):
            fixed = {safe_text(k): v for k, v in node.items()}
            node.clear()
            node.update(fixed)
    return value


def _http_code(spec: dict[str, Any]) -> str:
    """Python that performs the request through the egress proxy and prints the body."""
    return (
        "import json, urllib.request\n"
        f"spec = json.loads({json.dumps(json.dumps(spec, default=str))})\n"
        "body = spec.get('body')\n"
        "data = body.encode() if isinstance(body, str) else "
        "(json.dumps(body).encode() if body is not None else None)\n"
        "req = urllib.request.Request(spec['url'], data=data, method=spec.get('method', 'GET'),"
        " headers=spec.get('headers') or {})\n"
        "with urllib.request.urlopen(req, timeout=float(spec.get('timeout_s', 30))) as r:\n"
        "    print(r.read().decode('utf-8', 'replace'))\n"
    )

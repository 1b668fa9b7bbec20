"""The onebox MCP server: tools over the sessions, runs, knowledge and memory services.

Each tool resolves the caller's tenant (``default`` on stdio; the API key's on HTTP with
keys), calls :mod:`onebox.mcp.calls`, and turns an onebox error into an MCP tool error
that names the field and the fix (never a stack trace).
"""

import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from onebox.agent.plan import parse_plan
from onebox.bounds import load_yaml
from onebox.errors import OneboxError, ValidationError
from onebox.mcp import calls
from onebox.mcp.state import McpState

T = TypeVar("T")
INSTRUCTIONS = (
    "onebox runs code in an isolated sandbox and runs multi-step plans durably. Use "
    "execute_code for quick code (create_session first to keep files between calls), "
    "run_task/run_plan then wait_run for longer work, search_knowledge for the knowledge "
    "base, remember/recall for memory.")

SessionId = Annotated[str | None, Field(
    description="a session from create_session (files persist between calls in it); "
    "omit for a throwaway sandbox", pattern=r"^api-[0-9a-f]{16}$")]
RunId = Annotated[str, Field(description="the run id returned by run_task or run_plan")]
Scope = Annotated[str, Field(min_length=1, max_length=120,
                             description="memory scope, e.g. a project name")]


def error_text(exc: OneboxError) -> str:
    where = f" (field: {exc.field})" if exc.field else ""
    return f"{exc.code}{where}: {exc.message}"


@contextmanager
def tool_errors() -> Iterator[None]:
    try:
        yield
    except OneboxError as exc:
        raise ToolError(error_text(exc)) from None


def jsonable(value: dict[str, Any]) -> dict[str, Any]:
    """UUIDs and datetimes as strings, as the HTTP API sends them."""
    out: dict[str, Any] = json.loads(json.dumps(value, default=str))
    return out


async def call(state: McpState, ctx: Context, work: Callable[[str], Awaitable[dict[str, Any]]],
               ) -> dict[str, Any]:
    with tool_errors():
        return jsonable(await work(await state.tenant(ctx.headers)))


def parse_yaml_plan(text: str) -> dict[str, Any]:
    data = load_yaml(text, what="the plan")
    if not isinstance(data, dict):
        raise ValidationError("yaml must be a plan: a mapping with `steps:`", field="yaml")
    parse_plan(data)  # refused here, with the step and field, before anything is stored
    return data


def build_server(state: McpState) -> MCPServer:
    server: MCPServer = MCPServer("onebox", instructions=INSTRUCTIONS)
    _session_tools(server, state)
    _run_tools(server, state)
    _time_travel_tools(server, state)
    _knowledge_tools(server, state)
    return server


def _session_tools(server: MCPServer, state: McpState) -> None:
    @server.tool()
    async def execute_code(
        ctx: Context,
        code: Annotated[str, Field(min_length=1, max_length=1_000_000,
                                   description="the code to run")],
        language: Annotated[Literal["python", "bash", "node"],
                            Field(description="python, bash or node")] = "python",
        session_id: SessionId = None,
        timeout_s: Annotated[float | None, Field(gt=0, le=3600, description=(
            "wall-clock limit in seconds (default: the sandbox's)"))] = None,
        allow_domains: Annotated[list[str] | None, Field(max_length=50, description=(
            "hosts the code may reach over HTTPS (default: no network)"))] = None,
    ) -> dict[str, Any]:
        """Run code in the onebox sandbox. Python runs in the session's stateful
        interpreter (variables and imports persist between calls in a session): returns
        stdout, stderr, value (the last expression), results (rich outputs by MIME type)
        and error (name, value, traceback). bash and node run as one process: returns
        stdout, stderr and exit_code. The code's own failure is a result, not a tool error."""
        return await call(state, ctx, lambda tenant: calls.execute_code(
            state, tenant, code=code, language=language, session_id=session_id,
            timeout_s=timeout_s, allow_domains=list(allow_domains or [])))

    @server.tool()
    async def create_session(ctx: Context) -> dict[str, Any]:
        """A sandbox session whose workspace files persist between execute_code calls."""
        return await call(state, ctx, lambda tenant: calls.create_session(state, tenant))

    @server.tool()
    async def close_session(
        ctx: Context,
        session_id: Annotated[str, Field(pattern=r"^api-[0-9a-f]{16}$",
                                         description="the session to delete, with its files")],
    ) -> dict[str, Any]:
        """Delete a session and its workspace."""
        return await call(state, ctx, lambda t: calls.close_session(state, t, session_id))


def _run_tools(server: MCPServer, state: McpState) -> None:
    @server.tool()
    async def run_task(
        ctx: Context,
        task: Annotated[str, Field(min_length=1, max_length=20_000, description=(
            "what to do, in plain words; the onebox agent plans and runs it"))],
        files: Annotated[dict[str, str] | None, Field(description=(
            "input files placed in the run's workspace: relative path -> text content"))] = None,
        profile: Annotated[str | None, Field(max_length=120, description=(
            "an agent profile name (`onebox profile list`)"))] = None,
    ) -> dict[str, Any]:
        """Start an agent run for a task; returns run_id (follow it with wait_run)."""
        return await call(state, ctx, lambda t: calls.submit(
            state, t, plan=None, task=task, profile=profile, files=files))

    @server.tool()
    async def run_plan(
        ctx: Context,
        yaml: Annotated[str, Field(min_length=1, max_length=1_000_000, description=(
            "a onebox plan in YAML (or JSON): `steps:` with id, tool, code, depends_on"))],
    ) -> dict[str, Any]:
        """Start a run of an explicit plan; returns run_id (follow it with wait_run)."""
        async def go(tenant: str) -> dict[str, Any]:
            plan = parse_yaml_plan(yaml)
            return await calls.submit(state, tenant, plan=plan, task=None)
        return await call(state, ctx, go)

    @server.tool()
    async def get_run(ctx: Context, run_id: RunId) -> dict[str, Any]:
        """A run's status, answer, error and steps (stdout/stderr clipped)."""
        return await call(state, ctx, lambda t: calls.get_run(state, t, run_id))

    @server.tool()
    async def wait_run(
        ctx: Context, run_id: RunId,
        timeout_s: Annotated[float, Field(gt=0, le=600, description=(
            "how long to wait; on timeout the run goes on and finished is false"))] = 120,
    ) -> dict[str, Any]:
        """Wait for a run to finish (progress notifications if asked for); as get_run."""
        async def progress(done: float, total: float | None, message: str) -> None:
            await ctx.report_progress(done, total, message)
        return await call(state, ctx, lambda t: calls.wait_run(state, t, run_id, timeout_s,
                                                               progress))

    _file_tools(server, state)


def _time_travel_tools(server: MCPServer, state: McpState) -> None:
    @server.tool()
    async def fork_run(
        ctx: Context, run_id: RunId,
        at: Annotated[str, Field(min_length=1, max_length=120, description=(
            "the step to go on from: the steps before it are kept as they were"))],
        set: Annotated[dict[str, Any] | None, Field(description=(  # noqa: A002
            "changes, STEP.FIELD -> value: {\"s3.code\": \"echo hi\"}"))] = None,
        profile: Annotated[str | None, Field(max_length=64, description=(
            "a task run: the stored profile whose model is asked from the step on"))] = None,
    ) -> dict[str, Any]:
        """Fork a finished run at a step with a change (or, a task run, another profile);
        returns the new run_id (wait_run)."""
        return await call(state, ctx, lambda t: calls.fork(state, t, run_id, at, set, profile))

    @server.tool()
    async def replay_run(ctx: Context, run_id: RunId) -> dict[str, Any]:
        """Re-run every code step of a finished run from its own inputs (no model is asked);
        per-step matches and the first difference."""
        return await call(state, ctx, lambda t: calls.replay(state, t, run_id))

    @server.tool()
    async def diff_runs(ctx: Context, run_a: RunId, run_b: RunId) -> dict[str, Any]:
        """Two runs step by step: the steps that differ, with output and file diffs."""
        return await call(state, ctx, lambda t: calls.diff(state, t, run_a, run_b))


def _file_tools(server: MCPServer, state: McpState) -> None:
    @server.tool()
    async def run_files(ctx: Context, run_id: RunId) -> dict[str, Any]:
        """The files a finished run kept (its deliverables): path, size, sha256."""
        return await call(state, ctx, lambda t: calls.run_files_of(state, t, run_id))

    @server.tool()
    async def read_run_file(
        ctx: Context, run_id: RunId,
        path: Annotated[str, Field(min_length=1, max_length=512,
                                   description="a path listed by run_files")],
        max_bytes: Annotated[int, Field(ge=1, le=10_000_000, description=(
            "read at most this many bytes"))] = 200_000,
    ) -> dict[str, Any]:
        """One kept file of a run: UTF-8 text, or base64 for binary."""
        return await call(state, ctx, lambda t: calls.read_run_file(state, t, run_id, path,
                                                                    max_bytes))


def _knowledge_tools(server: MCPServer, state: McpState) -> None:
    @server.tool()
    async def search_knowledge(
        ctx: Context,
        query: Annotated[str, Field(min_length=1, max_length=2000, description="what to find")],
        collection: Annotated[str | None, Field(max_length=120, description=(
            "one collection (default: all of yours)"))] = None,
        k: Annotated[int, Field(ge=1, le=100, description="how many hits")] = 5,
    ) -> dict[str, Any]:
        """Hybrid (full-text + vector) search of the knowledge base."""
        return await call(state, ctx, lambda t: calls.search_knowledge(state, t, query,
                                                                       collection, k))

    @server.tool()
    async def remember(
        ctx: Context,
        text: Annotated[str, Field(min_length=1, max_length=20_000,
                                   description="the fact to remember")],
        scope: Scope = "default",
    ) -> dict[str, Any]:
        """Store a memory in a scope (a near duplicate returns the existing one)."""
        return await call(state, ctx, lambda t: calls.remember(state, t, text, scope))

    @server.tool()
    async def recall(
        ctx: Context,
        query: Annotated[str, Field(min_length=1, max_length=2000,
                                    description="what to recall")],
        scope: Scope = "default",
        k: Annotated[int, Field(ge=1, le=100, description="how many memories")] = 5,
    ) -> dict[str, Any]:
        """Memories of a scope most similar to the query."""
        return await call(state, ctx, lambda t: calls.recall(state, t, query, scope, k))

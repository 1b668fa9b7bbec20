"""What the agent is told about the sandbox and the catalog: measured, never hard-coded.

:func:`sandbox_facts` runs the sandbox's own ``python3`` once per backend (per worker)
and caches its version and installed distributions, with a bound on the cache.
:func:`workspace_listing` lists a run's workspace (names and sizes) from the host through
directory fds (no symlink followed), off the event loop, with a bound on entries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections import OrderedDict
from pathlib import Path

from onebox.agent.actions import ToolsResult
from onebox.agent.context import SandboxFacts
from onebox.agent.plan import Plan, check_tools
from onebox.sandbox import hostfs
from onebox.sandbox.base import ExecRequest, Limits, SandboxBackend
from onebox.store import catalog
from onebox.store.runs import Conn

log = logging.getLogger(__name__)
MAX_CACHED_BACKENDS = 8
MAX_PACKAGES = 500
MAX_LISTED_ENTRIES = 2_000
MAX_FILES = 200
SKIP_TOP = frozenset({".onebox"})
PROBE = (
    "import json, sys, importlib.metadata as m\n"
    "names = sorted({f\"{d.metadata['Name']}=={d.version}\" for d in m.distributions()"
    " if d.metadata['Name']}, key=str.lower)\n"
    "print(json.dumps({'python_version': sys.version.split()[0], 'packages': names}))\n"
)
_cache: OrderedDict[str, SandboxFacts] = OrderedDict()
_lock = asyncio.Lock()


async def sandbox_facts(backend: SandboxBackend, session_id: str) -> SandboxFacts | None:
    """The sandbox's Python version and packages, measured on first use by this backend."""
    async with _lock:
        key = backend.name
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
        facts = await _measure(backend, session_id)
        if facts is not None:
            _cache[key] = facts
            while len(_cache) > MAX_CACHED_BACKENDS:
                _cache.popitem(last=False)
        return facts


async def _measure(backend: SandboxBackend, session_id: str) -> SandboxFacts | None:
    request = ExecRequest(session_id=session_id, code=PROBE, language="python",
                          limits=Limits(timeout_s=30.0))
    result = await backend.execute(request)
    if not result.ok:
        log.warning("could not measure the sandbox's python (exit %s): %s",
                    result.exit_code, result.stderr[-500:])
        return None
    try:
        data = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        log.warning("the sandbox's python probe printed no JSON: %r", result.stdout[-200:])
        return None
    packages = tuple(str(p) for p in data.get("packages", ())[:MAX_PACKAGES])
    return SandboxFacts(str(data.get("python_version", "unknown")), packages)


async def workspace_listing(workspace: Path) -> dict[str, int | None]:
    """Regular files of the workspace with their sizes (at most ``MAX_FILES``)."""
    return await asyncio.to_thread(_listing, workspace)


def _listing(workspace: Path) -> dict[str, int | None]:
    files: dict[str, int | None] = {}
    bounds = hostfs.Bounds(max_entries=MAX_LISTED_ENTRIES, max_depth=8, deadline_s=5.0)
    try:
        with hostfs.root(workspace) as root_fd:
            for item in hostfs.walk(root_fd, bounds, skip_top=SKIP_TOP, pruned=[]):
                if item.kind == "file":
                    files[item.path] = item.st.st_size
                    if len(files) >= MAX_FILES:
                        break
    except (OSError, hostfs.BoundExceeded) as exc:
        log.info("workspace listing of %s stopped: %s", workspace, exc)
    return files


async def with_catalog_names(conn: Conn, found: ToolsResult) -> ToolsResult:
    """``found`` with the name of every catalog tool, so the agent refuses any other."""
    return dataclasses.replace(found, names=tuple(await catalog.tool_names(conn)))


async def check_plan_tools(conn: Conn, plan: Plan) -> None:
    """PlanError naming the catalog's tools if a tool step names a tool it does not have."""
    if any(s.kind == "tool" for s in plan.steps):
        check_tools(plan, await catalog.tool_names(conn))

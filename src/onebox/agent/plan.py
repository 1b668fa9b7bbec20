"""Plans as data: a DAG of steps, validated before anything runs.

A plan file (YAML or JSON)::

    name: quickstart
    steps:
      - id: make_csv
        tool: python
        code: |
          open("data.csv", "w").write("x\\n1\\n2\\n")
      - id: stats
        tool: bash
        code: wc -l data.csv
        depends_on: [make_csv]

Beyond code, a step may be another ``kind`` (http, knowledge_search, knowledge_read,
memory_remember, memory_recall, approval, final, or ``tool``: a registered
catalog tool named by ``input.name``) with its arguments in ``input``; run only ``when`` a condition over earlier outputs holds; fan out
with ``foreach`` over a list output (``item``/``index`` are bound); repeat
``until`` a condition holds (at most ``max_iterations`` times); or give a
``goal`` instead of ``code`` and let the agent write the code at run time.
Expressions are evaluated by :mod:`onebox.agent.expressions`, never ``eval``;
they may only name steps listed in ``depends_on``.

A bad plan (unknown field, cycle, missing dependency, duplicate id, wrong type)
raises :class:`~onebox.errors.PlanError` naming the step and the field.
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Collection, Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field

from onebox.agent.expressions import ExpressionError, referenced_names, template_expressions
from onebox.bounds import MAX_READ_BYTES, MAX_YAML_BYTES, check_depth, load_yaml
from onebox.domains import DEFAULT_PORTS, DomainRule
from onebox.domains import allowed as granted
from onebox.errors import PlanError, PolicyViolation, ValidationError

STEP_ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
Tool = Literal["python", "bash", "node"]
StepKind = Literal[
    "code", "tool", "http", "knowledge_search", "knowledge_read", "memory_remember",
    "memory_recall", "approval", "final",
]
#: the ``input`` keys each non-code kind requires
REQUIRED_INPUT: dict[str, tuple[str, ...]] = {
    "tool": ("name",), "http": ("url",), "knowledge_search": ("query",),
    "knowledge_read": ("document",), "memory_remember": ("text",),
    "memory_recall": ("query",), "approval": ("prompt",), "final": ("answer",),
}
LOOP_NAMES = frozenset({"item", "index", "iteration"})
MAX_TOP_K = 50  # hits a knowledge_search or memory_recall step may ask for
MAX_OUTPUTS = 100  # paths or globs a plan may declare as its deliverables
MAX_DOCUMENTS = 20  # knowledge documents a code step may read whole
DOCUMENTS_DIR = ".onebox/documents"  # in the workspace, beside the step's inputs
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")


class StepLimits(BaseModel):
    """Per-step limits; unset values fall back to the sandbox defaults in Settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float | None = Field(None, gt=0, le=24 * 3600, allow_inf_nan=False)
    memory_mb: int | None = Field(None, ge=16)
    cpus: float | None = Field(None, gt=0, allow_inf_nan=False)
    pids: int | None = Field(None, ge=8)
    disk_mb: int | None = Field(None, ge=1)


class Step(BaseModel):
    """One node of the plan: code in a language, run after its dependencies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=STEP_ID_PATTERN)
    tool: Tool | None = None
    code: str | None = Field(None, min_length=1)
    depends_on: tuple[str, ...] = ()
    description: str | None = None
    limits: StepLimits = Field(default_factory=StepLimits)
    allow_domains: tuple[str, ...] = ()
    max_attempts: int | None = Field(None, ge=1, le=20)
    kind: StepKind = "code"
    goal: str | None = Field(None, min_length=1)
    input: dict[str, Any] = Field(default_factory=dict)
    when: str | None = None
    foreach: str | None = None
    until: str | None = None
    max_iterations: int | None = Field(None, ge=1, le=1000)
    outputs: tuple[str, ...] = ()
    knowledge: tuple[str, ...] = ()
    # Knowledge documents (an id or source path, as knowledge_read takes) the step's code
    # reads whole: each is written to the workspace first, at ``document_file(name)``.
    documents: tuple[str, ...] = Field((), max_length=MAX_DOCUMENTS)
    # A built environment (`onebox env build NAME`) whose packages the step imports.
    environment: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class Plan(BaseModel):
    """A validated DAG of steps. Build with :func:`parse_plan` or :func:`load_plan`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    description: str | None = None
    max_parallel: int | None = Field(None, ge=1, le=64)
    # Two steps that do not depend on each other changing one path: the step later in the
    # plan wins ("plan_order"), or the step whose workspace would hold both fails ("fail").
    conflicts: Literal["plan_order", "fail"] = "plan_order"
    outputs: tuple[str, ...] = Field((), max_length=MAX_OUTPUTS)
    steps: tuple[Step, ...] = Field(min_length=1)

    @cached_property
    def _by_id(self) -> dict[str, Step]:
        return {s.id: s for s in self.steps}

    def step(self, step_id: str) -> Step:
        return self._by_id[step_id]

    @cached_property
    def _position(self) -> dict[str, int]:
        return {s.id: i for i, s in enumerate(self.steps)}

    def in_file_order(self, step_ids: Iterable[str]) -> list[Step]:
        """These steps (each once; unknown ids skipped) in the plan's order: O(k log k), not O(n)."""
        known = {sid for sid in step_ids if sid in self._position}
        return [self._by_id[sid] for sid in sorted(known, key=self._position.__getitem__)]

    def step_numbers(self) -> dict[str, int]:
        """1-based position of each step in a deterministic topological order."""
        return {step_id: n for n, step_id in enumerate(topological_order(self), start=1)}

    def to_data(self) -> dict[str, Any]:
        """The plan as plain JSON-able data, without defaults (stable for hashing)."""
        return self.model_dump(mode="json", exclude_defaults=True)


def parse_plan(data: Any) -> Plan:
    """Validate plain data (a dict from YAML/JSON) into a Plan, or raise PlanError."""
    if not isinstance(data, Mapping):
        raise PlanError(f"a plan must be a mapping with a 'steps' list, got {type(data).__name__}")
    try:
        check_depth(data, field="plan")
    except ValidationError as exc:
        raise PlanError(exc.message, field=exc.field) from None
    try:
        plan = Plan.model_validate(data)
    except pydantic.ValidationError as exc:
        raise _plan_error(exc, data) from None
    _check_graph(plan)
    for s in plan.steps:
        _check_step(s)
    _check_outputs(plan.outputs)
    return plan


def _check_outputs(outputs: tuple[str, ...]) -> None:
    """Declared deliverables: workspace paths or globs (``*``, ``?``, ``[..]``), relative,
    without ``..``, not under ``.onebox/``."""
    for i, pattern in enumerate(outputs):
        names = pattern.split("/")
        if (not pattern or pattern.startswith("/") or ".." in names or len(pattern) > 512
                or names[0] == ".onebox" or any(ord(ch) < 32 for ch in pattern)):
            raise PlanError(f"outputs[{i}] {pattern!r} must be a relative path or glob inside "
                            "the workspace (no '..', not under .onebox/)",
                            field=f"outputs[{i}]")


def top_k(value: Any, step_id: str) -> int:
    """A search's ``top_k``: an integer from 1 to ``MAX_TOP_K``, else PlanError saying so."""
    n = _whole_number(value)
    if n is None or not 1 <= n <= MAX_TOP_K:
        raise PlanError(f"top_k must be an integer from 1 to {MAX_TOP_K}, got {value!r}",
                        step=step_id, field="input.top_k")
    return n


def read_bytes(value: Any, step_id: str) -> int:
    """A knowledge_read's ``max_bytes``: an integer from 1 to ``MAX_READ_BYTES`` (4 MiB),
    else PlanError saying so and what to do with a larger document."""
    n = _whole_number(value)
    if n is None or not 1 <= n <= MAX_READ_BYTES:
        raise PlanError(f"max_bytes must be an integer from 1 to {MAX_READ_BYTES} (4 MiB), "
                        f"got {value!r}; search a larger document in chunks with "
                        "knowledge_search", step=step_id, field="input.max_bytes")
    return n


def _whole_number(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def check_tools(plan: Plan, known: Collection[str]) -> None:
    """Refuse a ``tool`` step naming a tool the catalog does not have, listing the catalog."""
    for s in plan.steps:
        name = s.input.get("name") if s.kind == "tool" else None
        if s.kind == "tool" and name not in known:
            listed = ", ".join(sorted(known)) or "(the catalog is empty)"
            raise PlanError(f"unknown tool {name!r}; the catalog has: {listed}. Use one of "
                            "these names, or register the tool first (`onebox tools list` "
                            "prints the catalog)", step=s.id, field="input.name")


def load_plan(path: str | Path) -> Plan:
    """Read a YAML or JSON plan file (at most 1 MiB, bounded nesting and aliases) and validate it."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_YAML_BYTES:
            raise PlanError(f"plan file {p} is {p.stat().st_size} bytes; the limit is "
                            f"{MAX_YAML_BYTES} bytes")
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"cannot read plan file {p}: {exc.strerror}") from exc
    return parse_plan(_json_plan(p, text) if p.suffix == ".json" else _yaml_plan(p, text))


def _json_plan(p: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"{p} is not valid JSON: {exc}") from exc
    except RecursionError:
        raise PlanError(f"{p} is nested too deeply to be a plan") from None


def _yaml_plan(p: Path, text: str) -> Any:
    try:
        return load_yaml(text, what=str(p))
    except ValidationError as exc:
        raise PlanError(exc.message) from None
    except yaml.YAMLError as exc:
        raise PlanError(f"{p} is not valid YAML: {exc}") from exc


def _plan_error(exc: pydantic.ValidationError, data: Mapping[str, Any]) -> PlanError:
    err = exc.errors()[0]
    loc = list(err["loc"])
    step_name: str | None = None
    if len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int):
        raw_steps = data.get("steps") or []
        raw = raw_steps[loc[1]] if loc[1] < len(raw_steps) else None
        raw_id = raw.get("id") if isinstance(raw, Mapping) else None
        step_name = str(raw_id) if raw_id else f"#{loc[1] + 1}"
        loc = loc[2:]
    field = ".".join(str(p) for p in loc) or None
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown field; allowed fields are " + ", ".join(
            sorted((Step if step_name else Plan).model_fields)
        )
    elif err["type"] == "missing":
        msg = "this field is required"
    elif err["type"] == "string_pattern_mismatch":
        msg = "step ids use letters, digits, '_', '.', '-' (at most 64 characters)"
    return PlanError(msg, step=step_name, field=field)


def _check_graph(plan: Plan) -> None:
    seen: set[str] = set()
    for s in plan.steps:
        if s.id in seen:
            raise PlanError("duplicate step id; every step needs its own id", step=s.id, field="id")
        seen.add(s.id)
    for s in plan.steps:
        for dep in s.depends_on:
            if dep not in seen:
                raise PlanError(
                    f"depends on '{dep}', which is not a step of this plan", step=s.id,
                    field="depends_on",
                )
            if dep == s.id:
                raise PlanError("a step cannot depend on itself", step=s.id, field="depends_on")
    topological_order(plan)


def _check_step(s: Step) -> None:
    """Kind-specific rules and expressions; PlanError naming the step and field."""
    _check_knowledge_paths(s)
    _check_documents(s)
    _check_required(s)
    if s.kind == "http":
        _check_http(s)
    if "top_k" in s.input and not isinstance(s.input["top_k"], str):
        top_k(s.input["top_k"], s.id)
    if s.kind == "knowledge_read" and not isinstance(s.input.get("max_bytes", ""), str):
        read_bytes(s.input["max_bytes"], s.id)
    _check_loop(s)
    _check_expressions(s)


def document_file(name: str) -> str:
    """Where a code step finds the knowledge document ``name`` whole: its last path
    component (unsafe characters as ``_``) in ``.onebox/documents/`` of the workspace."""
    base = _UNSAFE_NAME.sub("_", name.strip().rstrip("/").rsplit("/", 1)[-1])
    return f"{DOCUMENTS_DIR}/{base if base.strip('.') else 'document'}"


def _check_documents(s: Step) -> None:
    if s.documents and s.kind not in ("code", "tool"):
        raise PlanError("only code and tool steps read documents into their workspace; a "
                        f"{s.kind} step cannot (use a knowledge_read step for the text)",
                        step=s.id, field="documents")
    files: dict[str, str] = {}
    for name in s.documents:
        if not name.strip() or len(name) > 4096 or "\x00" in name:
            raise PlanError("each entry names a knowledge document: its id or source path "
                            "(as `onebox kb list` shows it)", step=s.id, field="documents")
        other = files.setdefault(document_file(name), name)
        if other != name:
            raise PlanError(f"{other!r} and {name!r} would both be {document_file(name)}; "
                            "name one of them by its document id", step=s.id,
                            field="documents")


def _check_knowledge_paths(s: Step) -> None:
    for path in s.knowledge:
        parts = path.split("/")
        if not path or path.startswith("/") or ".." in parts:
            raise PlanError(f"{path!r} must be a relative path inside the workspace",
                            step=s.id, field="knowledge")


def _check_required(s: Step) -> None:
    """What the step's kind needs: a code step its tool and code (or a goal), other kinds
    their string inputs."""
    if s.kind == "code":
        if s.tool is None:
            raise PlanError("this field is required for a code step (python, bash or node)",
                            step=s.id, field="tool")
        if s.code is None and s.goal is None:
            raise PlanError("this field is required (or give a 'goal' and the agent writes "
                            "the code)", step=s.id, field="code")
        return
    for key in REQUIRED_INPUT[s.kind]:
        if not isinstance(s.input.get(key), str) or not s.input[key].strip():
            raise PlanError(f"a {s.kind} step needs input.{key} (a string)", step=s.id,
                            field=f"input.{key}")


def _check_loop(s: Step) -> None:
    if s.foreach and s.until:
        raise PlanError("a step cannot have both foreach and until; split it in two",
                        step=s.id, field="until")
    if s.max_iterations is not None and not s.until:
        raise PlanError("max_iterations needs an until condition", step=s.id,
                        field="max_iterations")


def _check_http(s: Step) -> None:
    url = s.input["url"]
    if "{{" in url:
        return
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PlanError(f"input.url {url!r} must be an http(s) URL", step=s.id, field="input.url")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        rules = [DomainRule.parse(d) for d in s.allow_domains]
    except PolicyViolation as exc:
        raise PlanError(exc.message, step=s.id, field="allow_domains") from None
    if not granted(rules, parts.hostname, port):
        grant = parts.hostname if port in DEFAULT_PORTS else f"{parts.hostname}:{port}"
        raise PlanError(f"add {grant!r} to allow_domains to let this step reach it",
                        step=s.id, field="allow_domains")


def _check_expressions(s: Step) -> None:
    known = set(s.depends_on)
    loop = {"item", "index"} if s.foreach else set()
    fields: list[tuple[str, str, set[str]]] = []
    for name in ("when", "foreach"):
        value = getattr(s, name)
        if value:
            fields.append((name, value, known))
    if s.until:
        fields.append(("until", s.until, known | {s.id, "iteration"}))
    for key, value in s.input.items():
        if isinstance(value, str):
            fields += [(f"input.{key}", e, known | loop) for e in template_expressions(value)]
    for field, expression, allowed in fields:
        try:
            names = referenced_names(expression)
        except ExpressionError as exc:
            raise PlanError(str(exc), step=s.id, field=field) from None
        unknown = sorted(names - allowed)
        if unknown:
            hint = "add it to depends_on" if set(unknown) - LOOP_NAMES else "not bound here"
            raise PlanError(f"{field} refers to {', '.join(map(repr, unknown))}, which is not "
                            f"an earlier step in depends_on ({hint})", step=s.id, field=field)


def topological_order(plan: Plan) -> list[str]:
    """Kahn's algorithm with a heap, ties broken by position in the file: O(n log n + edges).

    PlanError naming one cycle on a cyclic plan.
    """
    position = {s.id: i for i, s in enumerate(plan.steps)}
    waiting = {s.id: len(set(s.depends_on)) for s in plan.steps}
    dependents: dict[str, list[str]] = {s.id: [] for s in plan.steps}
    for s in plan.steps:
        for dep in set(s.depends_on):
            dependents[dep].append(s.id)
    ready = [position[sid] for sid, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        sid = plan.steps[heapq.heappop(ready)].id
        order.append(sid)
        for after in dependents[sid]:
            waiting[after] -= 1
            if waiting[after] == 0:
                heapq.heappush(ready, position[after])
    if len(order) < len(plan.steps):
        _raise_cycle(plan, {sid for sid, n in waiting.items() if n > 0}, position)
    return order


MAX_CYCLE_NAMES = 10


def _raise_cycle(plan: Plan, left: set[str], position: Mapping[str, int]) -> None:
    """Follow unfinished dependencies from the first stuck step until one repeats: a cycle."""
    path: list[str] = []
    seen: dict[str, int] = {}
    sid = min(left, key=position.__getitem__)
    while sid not in seen:
        seen[sid] = len(path)
        path.append(sid)
        sid = next(d for d in plan.step(sid).depends_on if d in left)
    cycle = path[seen[sid]:]
    cycle.reverse()  # dependency first, as the steps would run
    first = min(cycle, key=position.__getitem__)
    at = cycle.index(first)
    cycle = cycle[at:] + cycle[:at]
    shown = cycle if len(cycle) <= MAX_CYCLE_NAMES else [*cycle[:MAX_CYCLE_NAMES], "..."]
    raise PlanError(
        f"dependency cycle between {len(cycle)} steps " + " -> ".join([*shown, cycle[0]])
        + "; remove one edge", step=first, field="depends_on")

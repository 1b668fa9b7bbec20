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

A bad plan (unknown field, cycle, missing dependency, duplicate id, wrong type)
raises :class:`~onebox.errors.PlanError` naming the step and the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field

from onebox.errors import PlanError

STEP_ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
Tool = Literal["python", "bash", "node"]


class StepLimits(BaseModel):
    """Per-step limits; unset values fall back to the sandbox defaults in Settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float | None = Field(None, gt=0, le=24 * 3600)
    memory_mb: int | None = Field(None, ge=16)
    cpus: float | None = Field(None, gt=0)
    pids: int | None = Field(None, ge=8)
    disk_mb: int | None = Field(None, ge=1)


class Step(BaseModel):
    """One node of the plan: code in a language, run after its dependencies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=STEP_ID_PATTERN)
    tool: Tool
    code: str = Field(min_length=1)
    depends_on: tuple[str, ...] = ()
    description: str | None = None
    limits: StepLimits = Field(default_factory=StepLimits)
    allow_domains: tuple[str, ...] = ()
    max_attempts: int | None = Field(None, ge=1, le=20)


class Plan(BaseModel):
    """A validated DAG of steps. Build with :func:`parse_plan` or :func:`load_plan`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    description: str | None = None
    max_parallel: int | None = Field(None, ge=1, le=64)
    steps: tuple[Step, ...] = Field(min_length=1)

    def step(self, step_id: str) -> Step:
        for s in self.steps:
            if s.id == step_id:
                return s
        raise KeyError(step_id)

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
        plan = Plan.model_validate(data)
    except pydantic.ValidationError as exc:
        raise _plan_error(exc, data) from None
    _check_graph(plan)
    return plan


def load_plan(path: str | Path) -> Plan:
    """Read a YAML or JSON plan file and validate it."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"cannot read plan file {p}: {exc.strerror}") from exc
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise PlanError(f"{p} is not valid {'JSON' if p.suffix == '.json' else 'YAML'}: {exc}") from exc
    return parse_plan(data)


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


def topological_order(plan: Plan) -> list[str]:
    """Kahn's algorithm, ties broken by position in the file; PlanError on a cycle."""
    position = {s.id: i for i, s in enumerate(plan.steps)}
    pending = {s.id: set(s.depends_on) for s in plan.steps}
    order: list[str] = []
    while pending:
        ready = sorted((sid for sid, deps in pending.items() if not deps), key=position.__getitem__)
        if not ready:
            cycle = sorted(pending, key=position.__getitem__)
            raise PlanError(
                "dependency cycle between steps " + " -> ".join(cycle) + "; remove one edge",
                step=cycle[0], field="depends_on",
            )
        for sid in ready:
            order.append(sid)
            del pending[sid]
        for deps in pending.values():
            deps.difference_update(ready)
    return order

"""Request bodies. Every string refuses NUL (PostgreSQL text cannot hold it) and has a size cap."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)
from pydantic_core import PydanticCustomError


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def _no_nul_deep(value: Any) -> Any:
    if isinstance(value, str):
        _no_nul(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            _no_nul(str(k))
            _no_nul_deep(v)
    elif isinstance(value, list):
        for item in value:
            _no_nul_deep(item)
    return value


def text(max_length: int, min_length: int = 0) -> Any:
    return Annotated[str, Field(min_length=min_length, max_length=max_length),
                     AfterValidator(_no_nul)]


def _plan_not_text(value: Any) -> Any:
    if isinstance(value, str):
        raise PydanticCustomError("plan_is_text", (
            "is text; it must be the plan document as a JSON object. For a YAML plan, POST "
            "{\"text\": <the YAML>} to /v1/plans/parse and send the 'plan' it returns"))
    return value


Name = text(200, 1)
ShortText = text(2000)
JsonObject = Annotated[dict[str, Any], AfterValidator(_no_nul_deep)]
PlanDocument = Annotated[dict[str, Any], BeforeValidator(_plan_not_text),
                         AfterValidator(_no_nul_deep)]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ForkRun(Body):
    """Fork a finished run at a step: what finished before it is kept, the workspace is as
    it was just before it; ``plan`` replaces the run's plan, ``set`` changes fields of steps
    (``{"s3.code": "echo hi"}``); for a run the agent schedules, ``profile`` (a stored
    profile's name) takes its model calls from ``at`` on."""

    at: text(120, 1)  # type: ignore[valid-type]
    plan: PlanDocument | None = None
    set: JsonObject = Field(default_factory=dict)
    profile: Name | None = None  # type: ignore[valid-type]


class CreateRun(Body):
    """Exactly one of ``plan`` (a plan document, as in a plan file) or ``task`` (words)."""

    plan: PlanDocument | None = None
    task: text(20_000, 1) | None = None  # type: ignore[valid-type]
    name: Name | None = None  # type: ignore[valid-type]
    idempotency_key: Name | None = None  # type: ignore[valid-type]
    profile: Name | None = None  # type: ignore[valid-type]
    files: list[uuid.UUID] = Field(default_factory=list, max_length=10_000,
                                   description="ids from POST /v1/uploads: files placed in the "
                                   "run's workspace before its first step")

    @model_validator(mode="after")
    def _one_source(self) -> CreateRun:
        if (self.plan is None) == (self.task is None):
            raise ValueError("give exactly one of 'plan' or 'task'")
        return self


class Decision(Body):
    comment: ShortText | None = None  # type: ignore[valid-type]
    by: Name | None = None  # type: ignore[valid-type]


class CreateSession(Body):
    # a built environment (`onebox env build NAME`): every call of the session imports it
    environment: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class Execute(Body):
    code: text(1_000_000, 1)  # type: ignore[valid-type]
    language: Literal["python", "bash", "node"] = "python"
    timeout_s: float | None = Field(None, gt=0, le=3600)
    memory_mb: int | None = Field(None, ge=16, le=65536)
    allow_domains: list[text(253, 1)] = Field(default_factory=list, max_length=50)  # type: ignore[valid-type]
    stdin: text(1_000_000) | None = None  # type: ignore[valid-type]
    # python runs in the session's stateful interpreter unless this is true (then, as
    # bash and node always do, in a fresh one-shot process with an exit code).
    stateless: bool = False


class AddDocument(Body):
    source: Name  # type: ignore[valid-type]
    text: text(5_000_000, 1)  # type: ignore[valid-type]
    collection: text(120, 1) = "default"  # type: ignore[valid-type]
    title: Name | None = None  # type: ignore[valid-type]
    metadata: JsonObject = Field(default_factory=dict)


class Search(Body):
    query: text(4000, 1)  # type: ignore[valid-type]
    k: int = Field(5, ge=1, le=100)
    collections: list[text(120, 1)] | None = Field(None, max_length=50)  # type: ignore[valid-type]
    metadata: JsonObject | None = None


class Remember(Body):
    scope: text(120, 1)  # type: ignore[valid-type]
    content: text(100_000, 1)  # type: ignore[valid-type]
    user_id: text(200) = ""  # type: ignore[valid-type]
    kind: Literal["short", "long"] = "short"
    metadata: JsonObject = Field(default_factory=dict)
    happened_at: text(100) | None = None  # type: ignore[valid-type]  # when it happened (a date)


class Recall(Body):
    scope: text(120, 1)  # type: ignore[valid-type]
    query: text(4000, 1)  # type: ignore[valid-type]
    k: int = Field(5, ge=1, le=100)
    user_id: text(200) = ""  # type: ignore[valid-type]
    include_superseded: bool = False


class Compact(Body):
    scope: text(120, 1)  # type: ignore[valid-type]
    older_than_days: float = Field(30.0, ge=0, le=36500)
    max_access: int = Field(1, ge=0, le=1_000_000)


class CacheLookup(Body):
    question: text(4000, 1)  # type: ignore[valid-type]
    scope: text(120, 1) = "default"  # type: ignore[valid-type]

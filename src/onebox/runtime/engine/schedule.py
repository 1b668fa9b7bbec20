"""Pure scheduling decisions: which steps are ready, when to retry, whether a run is done."""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from onebox.agent.hashing import canonical_hash
from onebox.agent.plan import Plan, Step

BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0


@dataclass(frozen=True)
class StepState:
    """The latest attempt of one step, as the queue sees it."""

    status: str
    attempt: int
    output_hash: str | None


def ready_steps(
    plan: Plan, states: Mapping[str, StepState], candidates: Collection[str] | None = None
) -> list[Step]:
    """Steps with no attempt yet whose dependencies all succeeded, in plan order.

    ``candidates`` limits the check to those step ids (the dependents of a step that just
    succeeded), so ``states`` needs only them and their dependencies.
    """
    pool = plan.steps if candidates is None else plan.in_file_order(candidates)
    return [
        s for s in pool
        if s.id not in states
        and all(d in states and states[d].status == "SUCCESS" for d in s.depends_on)
    ]


@dataclass(frozen=True)
class PlanIndex:
    """A plan with what the scheduler looks up on every step: computed once per version."""

    plan: Plan
    numbers: Mapping[str, int]
    dependents: Mapping[str, tuple[str, ...]]

    @classmethod
    def of(cls, plan: Plan) -> PlanIndex:
        deps: dict[str, list[str]] = {s.id: [] for s in plan.steps}
        for s in plan.steps:
            for d in s.depends_on:
                deps[d].append(s.id)
        return cls(plan, plan.step_numbers(), {k: tuple(v) for k, v in deps.items()})

    def around(self, step_id: str) -> tuple[tuple[str, ...], set[str]]:
        """The dependents of ``step_id`` and every step whose state decides if they are ready."""
        after = self.dependents[step_id]
        needed = set(after)
        for sid in after:
            needed.update(self.plan.step(sid).depends_on)
        return after, needed


def backoff_s(attempt: int, rng: random.Random | None = None) -> float:
    """Delay before attempt ``attempt + 1``: exponential, capped, with jitter in [50%, 100%]."""
    ceiling = min(BACKOFF_CAP_S, BACKOFF_BASE_S * (2 ** max(0, attempt - 1)))
    return round(ceiling * (rng or random).uniform(0.5, 1.0), 3)


def step_input(step: Step, states: Mapping[str, StepState]) -> dict[str, Any]:
    """The canonical input of a step: what it runs and the outputs it depends on."""
    extra = {} if step.kind == "code" else {"kind": step.kind, "input": step.input}
    return {
        **extra,
        "tool": step.tool,
        "code": step.code,
        "limits": step.limits.model_dump(exclude_none=True),
        "allow_domains": list(step.allow_domains),
        "inputs": {d: states[d].output_hash for d in sorted(step.depends_on) if d in states},
    }


def step_input_hash(step: Step, states: Mapping[str, StepState]) -> str:
    return canonical_hash(step_input(step, states))

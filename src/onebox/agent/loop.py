"""The agent as a state machine: request -> intent -> plan -> steps -> finish.

    agent = Agent("count the rows of data.csv")        # or Agent(plan=load_plan(p))
    actions = agent.start()
    ...  perform actions, then  actions += agent.observe(observation)
    agent.result                                        # the Finish action once done

See :mod:`onebox.agent.actions` for the protocol. Every model mistake
(unparseable intent or plan, code that does not compile, a failing step) is fed
back to the model a bounded number of times; past the bound the run finishes
with ``ok=False`` and an error that says what happened.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from onebox.agent import prompting as p
from onebox.agent.actions import (
    Action,
    CallModel,
    CheckCode,
    CheckResult,
    Decision,
    Finish,
    LookupTools,
    ModelReply,
    Observation,
    RecordIntent,
    RecordPlan,
    SkipStep,
    StepAction,
    StepResult,
    ToolHint,
    ToolsResult,
)
from onebox.agent.expressions import ExpressionError, as_list, evaluate
from onebox.agent.plan import Plan, Step, parse_plan, topological_order
from onebox.agent.replanner import merge_replan
from onebox.agent.state import (
    FINISHED,
    AgentConfig,
    Instance,
    StepState,
    aggregate,
    failure_text,
    instances_for,
)
from onebox.agent.steps import render_input, step_action
from onebox.errors import AgentError, OneboxError

Handler = Callable[[Any], None]
EXPECTS: dict[type[Action], type[Observation]] = {
    CallModel: ModelReply, CheckCode: CheckResult, LookupTools: ToolsResult,
}


class Agent:
    def __init__(self, request: str = "", *, plan: Plan | None = None,
                 config: AgentConfig | None = None, tools: Sequence[ToolHint] = ()) -> None:
        if not request and plan is None:
            raise AgentError("give the agent a request or a plan")
        self.request = request
        self.config = config or AgentConfig()
        self.tools = tuple(tools)
        self.plan: Plan | None = None
        self.version = 0
        self.steps: dict[str, StepState] = {}
        self.history: list[Action] = []
        self.decisions: list[Decision] = []
        self.result: Finish | None = None
        self._given_plan = plan
        self._order: list[str] = []
        self._steps_by_id: dict[str, Step] = {}
        self._shared_code: dict[str, str] = {}
        self._code_waiters: dict[str, list[Instance]] = {}
        self._waiting_ids: list[str] = []
        self._count = 0
        self._out: list[Action] = []
        self._waiting: dict[str, tuple[Action, Handler]] = {}
        self._queue: list[Instance] = []
        self._active = 0
        self._executions: dict[str, int] = {}
        self._replans = 0
        self._replanning = False
        self._blocked: tuple[str, str] | None = None
        self._started = False

    # ------------------------------------------------------------------ protocol
    @property
    def finished(self) -> bool:
        return self.result is not None

    def start(self) -> list[Action]:
        if self._started:
            raise AgentError("Agent.start() was already called")
        self._started = True
        if self._given_plan is not None:
            self._adopt(self._given_plan, "plan given by the caller", (), set())
        elif not self.config.use_model:
            raise AgentError("a request needs a model; give a plan or set use_model=True")
        else:
            self._ask_json("intent", p.intent_request(self.request), p.parse_intent,
                           self._on_intent, Decision("intent", "extract the intent of the request"))
        self._pump()
        return self._drain()

    def observe(self, observation: Observation) -> list[Action]:
        entry = self._waiting.pop(observation.action_id, None)
        if entry is None:
            raise AgentError(f"no action {observation.action_id!r} is waiting for an observation")
        action, handler = entry
        expected = StepResult if isinstance(action, StepAction) else EXPECTS[type(action)]
        if not isinstance(observation, expected):
            raise AgentError(f"action {action.id} ({action.type}) needs a {expected.__name__}, "
                             f"got {type(observation).__name__}")
        if not self.finished:
            handler(observation)
            self._pump()
        return self._drain()

    def outstanding(self) -> list[Action]:
        """Issued actions still waiting for their observation (to perform after a resume)."""
        return [action for action, _ in self._waiting.values()]

    # ------------------------------------------------------------------ plumbing
    def _issue(self, cls: type[Action], decision: Decision, handler: Handler | None = None,
               **fields: Any) -> Action:
        self._count += 1
        action = cls(id=f"a{self._count}", decision=decision, **fields)
        self._out.append(action)
        self.history.append(action)
        self.decisions.append(decision)
        if action.expects_observation:
            assert handler is not None, f"{cls.__name__} needs a handler"
            self._waiting[action.id] = (action, handler)
        return action

    def _step(self, step_id: str) -> Step:
        return self._steps_by_id[step_id]

    def _drain(self) -> list[Action]:
        out, self._out = self._out, []
        return out

    def _ask_json(self, purpose: str, request: Any, parse: Callable[[Any], Any],
                  on_ok: Handler, decision: Decision, repairs: int = 0) -> None:
        """A model call whose reply is parsed; an unusable reply is fed back, bounded."""

        def on_reply(obs: ModelReply) -> None:
            try:
                value = parse(obs.response)
            except (ValueError, OneboxError) as exc:
                if repairs >= self.config.max_plan_repairs:
                    self._fail(f"the model's {purpose} reply was still unusable after "
                               f"{repairs} repairs: {exc}")
                    return
                why = Decision("repair", f"{purpose} reply unusable ({exc}); asking again "
                               f"({repairs + 1}/{self.config.max_plan_repairs})")
                self._ask_json(purpose, p.repair_request(request, obs.response, str(exc)),
                               parse, on_ok, why, repairs + 1)
                return
            on_ok(value)

        kind = purpose if repairs == 0 else f"repair_{purpose}"
        self._issue(CallModel, decision, on_reply, purpose=kind, request=request)

    # ------------------------------------------------------------------ intent and plan
    def _on_intent(self, intent: Any) -> None:
        self.intent = intent
        self._issue(RecordIntent, Decision("intent", f"goal: {intent.goal}"), intent=intent)
        if self.config.lookup_tools:
            why = Decision("lookup", "rank catalog tools for formats "
                           f"{list(intent.formats)} and capabilities {list(intent.capabilities)}")
            self._issue(LookupTools, why, self._on_tools, formats=intent.formats,
                        capabilities=intent.capabilities)
        else:
            self._ask_plan()

    def _on_tools(self, obs: ToolsResult) -> None:
        self.tools = obs.tools or self.tools
        self._ask_plan()

    def _ask_plan(self) -> None:
        request = p.plan_request(self.request, self.intent, self.tools)
        self._ask_json("plan", request, lambda r: parse_plan(p.extract_json(r)),
                       lambda plan: self._adopt(plan, "written by the model for the request",
                                                (), set()),
                       Decision("plan", "ask the model for a plan"))

    def _adopt(self, plan: Plan, reason: str, changes: tuple[Decision, ...],
               finished: set[str]) -> None:
        self.version += 1
        self.plan = plan
        self._order = topological_order(plan)
        self._steps_by_id = {s.id: s for s in plan.steps}
        self.steps = {s.id: (self.steps[s.id] if s.id in finished else StepState())
                      for s in plan.steps}
        self._waiting_ids = [sid for sid in self._order if sid not in finished]
        self._shared_code.clear()
        self._code_waiters.clear()
        self._queue.clear()
        self._replanning = False
        why = Decision("plan" if self.version == 1 else "replan",
                       f"plan v{self.version}: {reason}")
        self._issue(RecordPlan, why,
                    plan=plan, version=self.version, reason=reason, changes=changes)
        self.decisions.extend(changes)

    # ------------------------------------------------------------------ scheduling
    def _pump(self) -> None:
        if self.finished or self.plan is None or self._replanning:
            return
        if self._blocked is not None:
            if self._active == 0:
                kind, reason = self._blocked
                self._blocked = None
                self._replan(reason) if kind == "replan" else self._fail(reason)
            return
        self._schedule()
        limit = self.plan.max_parallel or self.config.max_parallel
        while self._queue and self._active < limit:
            inst = self._queue.pop(0)
            inst.state = "active"
            self._active += 1
            self._begin(inst)
        if self._active == 0 and all(s.status in FINISHED for s in self.steps.values()):
            self._complete()

    def _schedule(self) -> None:
        still_waiting = []
        for i, sid in enumerate(self._waiting_ids):
            step = self._step(sid)
            if all(self.steps[d].status in FINISHED for d in step.depends_on):
                self._start_step(step, self.steps[sid])
                if self._blocked:
                    still_waiting.extend(self._waiting_ids[i + 1:])
                    break
            else:
                still_waiting.append(sid)
        self._waiting_ids = still_waiting

    def _start_step(self, step: Step, state: StepState) -> None:
        names = self._names(step)
        skipped = [d for d in step.depends_on if self.steps[d].status == "skipped"]
        if skipped and not step.when:
            self._skip(step, state, f"dependency {skipped[0]!r} was skipped and the step has "
                       "no 'when' condition")
            return
        try:
            if step.when and not evaluate(step.when, names):
                self._skip(step, state, f"condition {step.when!r} is false")
                return
            items = list(as_list(evaluate(step.foreach, names), step.foreach)) \
                if step.foreach else None
        except ExpressionError as exc:
            state.status = "failed"
            self._block("replan", f"step {step.id!r}: {exc}")
            return
        if items is not None and len(items) > self.config.max_fanout:
            state.status = "failed"
            self._block("replan", f"step {step.id!r}: foreach gives {len(items)} items, more "
                        f"than the limit of {self.config.max_fanout}")
            return
        if items == []:
            self._skip(step, state, f"foreach {step.foreach!r} is an empty list")
            return
        state.status = "running"
        state.instances = instances_for(step, items)
        self._queue.extend(state.instances)

    def _skip(self, step: Step, state: StepState, reason: str) -> None:
        state.status, state.reason = "skipped", reason
        self._issue(SkipStep, Decision("skip", reason, step.id), step_id=step.id)

    def _names(self, step: Step, inst: Instance | None = None) -> dict[str, Any]:
        names: dict[str, Any] = {d: self.steps[d].output for d in step.depends_on}
        if inst is not None:
            names.update(inst.loop_names())
        return names

    # ------------------------------------------------------------------ one instance
    def _begin(self, inst: Instance) -> None:
        step = self._step(inst.step_id)
        if step.kind == "final":
            self._final(step, inst)
        elif step.kind != "code":
            self._execute(inst)
        elif inst.code is None:
            self._need_code(step, inst)
        else:
            self._precheck(step, inst, inst.code)

    def _final(self, step: Step, inst: Instance) -> None:
        try:
            answer = render_input(step, self._names(step, inst))["answer"]
        except ExpressionError as exc:
            self._instance_failed(inst, f"final answer: {exc}")
            return
        self.decisions.append(Decision("run", "final answer written", step.id))
        self._instance_done(inst, {"ok": True, "result": answer, "stdout": answer})

    def _need_code(self, step: Step, inst: Instance) -> None:
        """Code for a goal step; a fan-out asks once and shares the code with every item."""
        if not step.foreach:
            self._write_code(step, inst, [inst])
            return
        shared = self._shared_code.get(step.id)
        if shared is not None:
            self._precheck(step, inst, shared)
            return
        waiting = self._code_waiters.setdefault(step.id, [])
        waiting.append(inst)
        if len(waiting) == 1:
            self._write_code(step, inst, waiting)

    def _write_code(self, step: Step, inst: Instance, targets: list[Instance]) -> None:
        loop = inst.loop_names()
        if step.foreach:
            loop = {f"item (for example; the code runs once per element of {step.foreach})":
                    inst.item}
        deps = {d: self.steps[d].output for d in step.depends_on}
        request = p.code_request(step, self.request, deps, loop, self.config.prompt_output_chars)
        key = step.id if step.foreach else inst.key
        why = Decision("write", f"ask the model to write the {step.tool} code for: {step.goal}",
                       key)
        self._ask_code(targets, "write_code", request, why)

    def _ask_code(self, targets: list[Instance], purpose: str, request: Any,
                  why: Decision) -> None:
        step = self._step(targets[0].step_id)

        def on_reply(obs: ModelReply) -> None:
            try:
                code = p.parse_code(obs.response)
            except ValueError as exc:
                for inst in list(targets):
                    self._code_rejected(inst, str(exc))
                return
            if purpose == "write_code" and step.foreach:
                self._shared_code[step.id] = code
                targets[:] = self._code_waiters.pop(step.id, targets)
            for inst in list(targets):
                self._precheck(step, inst, code)

        self._issue(CallModel, why, on_reply, purpose=purpose, request=request,
                    step_id=why.step_id)

    def _precheck(self, step: Step, inst: Instance, code: str) -> None:
        inst.code = code
        if not self.config.use_model or step.tool == "python" and _compiles(code) is None:
            self._execute(inst)
            return
        if step.tool == "python":
            self._code_rejected(inst, _compiles(code) or "")
            return

        def on_check(obs: CheckResult) -> None:
            if obs.ok:
                self._execute(inst)
            else:
                self._code_rejected(inst, f"{step.tool} syntax check failed: {obs.message}")

        why = Decision("check", f"syntax-check the {step.tool} code before running it", inst.key)
        self._issue(CheckCode, why, on_check, step_id=inst.key, language=step.tool, code=code)

    def _code_rejected(self, inst: Instance, error: str) -> None:
        inst.code_fixes += 1
        if inst.code_fixes > self.config.max_code_fixes:
            self._instance_failed(inst, f"the code still failed its check after "
                                  f"{self.config.max_code_fixes} fixes: {error}")
            return
        self._fix(inst, error, "before running")

    def _fix(self, inst: Instance, error: str, when: str) -> None:
        if self._blocked:
            self._abandon(inst)
            return
        step = self._step(inst.step_id)
        attempt = self._executions.get(inst.key, 0)
        request = p.fix_request(step, inst.code or "", error, attempt)
        why = Decision("fix", f"{when}: {error.splitlines()[0] if error else 'error'}; "
                       "ask the model to fix the code", inst.key)
        self._ask_code([inst], "fix_code", request, why)

    def _execute(self, inst: Instance) -> None:
        if self._blocked:
            self._abandon(inst)
            return
        step = self._step(inst.step_id)
        n = self._executions[inst.key] = self._executions.get(inst.key, 0) + 1
        why = inst.next_decision or Decision("run", self._why_run(step, inst), inst.key)
        inst.next_decision = None
        names = self._names(step, inst)
        try:
            cls, fields = step_action(step, inst, names, n, self.version)
        except ExpressionError as exc:
            self._instance_failed(inst, str(exc))
            return
        self._issue(cls, why, lambda obs: self._on_result(inst, obs), **fields)

    def _why_run(self, step: Step, inst: Instance) -> str:
        done = [d for d in step.depends_on if self.steps[d].status == "succeeded"]
        why = f"dependencies {', '.join(done)} succeeded" if done else "no dependencies"
        if step.when:
            why += f"; condition {step.when!r} is true"
        if inst.index is not None:
            why += f"; item {inst.index + 1} of {len(self.steps[step.id].instances)} " \
                   f"of {step.foreach!r}"
        return why

    def _on_result(self, inst: Instance, obs: StepResult) -> None:
        step = self._step(inst.step_id)
        if obs.ok:
            self._on_success(step, inst, obs.output())
            return
        error = failure_text(obs)
        inst.failures += 1
        allowed = step.max_attempts or self.config.max_attempts
        if step.kind == "approval":
            self._instance_failed(inst, f"approval was refused: {error}", replan=False)
        elif inst.failures >= allowed:
            self._instance_failed(inst, f"failed {inst.failures} of {allowed} attempts; "
                                  f"last: {error}")
        elif step.kind == "code" and self.config.use_model:
            inst.next_decision = Decision("retry", f"attempt {inst.failures + 1} of {allowed} "
                                          "with the fixed code", inst.key)
            self._fix(inst, error, f"attempt {inst.failures} failed")
        else:
            inst.next_decision = Decision("retry", f"attempt {inst.failures} failed ({error}); "
                                          f"retrying ({inst.failures + 1}/{allowed})", inst.key)
            self._execute(inst)

    def _on_success(self, step: Step, inst: Instance, output: dict[str, Any]) -> None:
        if step.until:
            inst.iteration += 1
            names = {**self._names(step, inst), step.id: output}
            try:
                done = evaluate(step.until, names)
            except ExpressionError as exc:
                self._instance_failed(inst, f"until: {exc}")
                return
            limit = step.max_iterations or self.config.max_iterations
            if not done and inst.iteration >= limit:
                self._instance_failed(inst, f"until {step.until!r} still false after "
                                      f"{limit} iterations")
                return
            if not done:
                inst.next_decision = Decision("iterate", f"until {step.until!r} is false after "
                                              f"iteration {inst.iteration}", inst.key)
                self._execute(inst)
                return
        self._instance_done(inst, output)
        result = output.get("result")
        if isinstance(result, dict) and result.get("replan"):
            self._block("replan", f"step {inst.key!r} asked for a new plan: {result['replan']}")

    def _instance_done(self, inst: Instance, output: dict[str, Any]) -> None:
        inst.state, inst.output = "done", output
        self._active -= 1
        state = self.steps[inst.step_id]
        if all(i.state == "done" for i in state.instances):
            state.status = "succeeded"
            state.output = aggregate(self._step(inst.step_id), state.instances)

    def _instance_failed(self, inst: Instance, reason: str, replan: bool = True) -> None:
        inst.state = "failed"
        self._active -= 1
        state = self.steps[inst.step_id]
        state.status, state.reason = "failed", reason
        self._block("replan" if replan else "fail", f"step {inst.key!r} {reason}")

    def _abandon(self, inst: Instance) -> None:
        inst.state = "queued"
        self._active -= 1

    def _block(self, kind: str, reason: str) -> None:
        """Stop starting work; once nothing is in flight, replan or fail."""
        self._queue.clear()
        if kind == "replan" and (not self.config.use_model
                                 or self._replans >= self.config.max_replans):
            kind = "fail"
            if self.config.use_model:
                reason += f" (no replans left: {self.config.max_replans} used)"
        if self._blocked is None or kind == "fail":
            self._blocked = (kind, reason)

    # ------------------------------------------------------------------ replan and finish
    def _replan(self, reason: str) -> None:
        assert self.plan is not None
        self._replans += 1
        self._replanning = True
        old, version = self.plan, self.version + 1
        finished = {sid for sid, s in self.steps.items() if s.status in FINISHED}
        states = {sid: s.summary() for sid, s in self.steps.items()}
        request = p.replan_request(self.request, old, version, reason, states)
        self._ask_json(
            "replan", request,
            lambda r: merge_replan(old, p.extract_json(r), finished, version),
            lambda merged: self._adopt(merged[0], reason, merged[1], finished),
            Decision("replan", f"{reason}; ask the model for plan v{version} "
                     f"({self._replans}/{self.config.max_replans})"),
        )

    def _complete(self) -> None:
        assert self.plan is not None
        outputs = {sid: s.output for sid, s in self.steps.items() if s.status == "succeeded"}
        finals = [s.id for s in self.plan.steps if s.kind == "final" and s.id in outputs]
        last = [sid for sid in self._order if sid in outputs]
        answer = None
        if finals:
            answer = str((outputs[finals[-1]] or {}).get("result"))
        elif last:
            answer = str((outputs[last[-1]] or {}).get("stdout") or "").strip() or None
        skipped = sum(1 for s in self.steps.values() if s.status == "skipped")
        why = Decision("finish", f"all {len(self.steps)} steps of plan v{self.version} finished "
                       f"({skipped} skipped)")
        self.result = self._issue(Finish, why, ok=True, answer=answer, outputs=outputs)  # type: ignore[assignment]

    def _fail(self, reason: str) -> None:
        self.result = self._issue(Finish, Decision("fail", reason), ok=False, error=reason)  # type: ignore[assignment]


def _compiles(code: str) -> str | None:
    """None if the Python code compiles, else the SyntaxError as text."""
    try:
        compile(code, "<step>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return f"SyntaxError: {exc.msg} (line {exc.lineno})"
    except ValueError as exc:
        return f"invalid source: {exc}"
    return None

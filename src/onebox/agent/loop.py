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

from collections.abc import Iterable
from typing import Any

from onebox.agent import prompting as p
from onebox.agent.actions import (
    Action,
    Decision,
    Finish,
    Intent,
    LookupTools,
    Observation,
    RecordIntent,
    RecordPlan,
    SkipStep,
    StepResult,
    ToolsResult,
)
from onebox.agent.codesteps import CodeSteps
from onebox.agent.context import failure_text, workspace_files
from onebox.agent.expressions import ExpressionError, as_list, evaluate
from onebox.agent.plan import Plan, Step, check_tools, parse_plan, topological_order
from onebox.agent.replanner import merge_replan
from onebox.agent.sources import excerpt_note, excerpts
from onebox.agent.state import FINISHED, Instance, StepState, aggregate, instances_for
from onebox.agent.steps import render_input, step_action
from onebox.errors import AgentError, PlanError


class Agent(CodeSteps):
    """Request (or plan) in, actions out; see the module docstring."""

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

    def resume(self, observations: Iterable[Observation]) -> list[Action]:
        """Start, then replay the stored observations of an interrupted run, in their order.

        Returns the actions still to perform (:meth:`outstanding`). Replaying issues the
        same action ids as before, so notices already stored can be recognised by id; if
        the run had finished, :attr:`result` is set and nothing is outstanding.
        """
        self.start()
        for observation in observations:
            self.observe(observation)
        return self.outstanding()

    def _on_intent(self, intent: Intent) -> None:
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
        self.tool_names.update(obs.names or (t.name for t in self.tools))
        self._ask_plan()

    def _known_tools(self, plan: Plan) -> Plan:
        """``plan`` if every tool step names a catalog tool (when the catalog is known)."""
        if self.tool_names:
            check_tools(plan, self.tool_names)
        return plan

    def _ask_plan(self) -> None:
        intent = self.intent or Intent(goal=self.request)
        request = p.plan_request(self.request, intent, self.tools)
        self._ask_json("plan", request, lambda r: self._known_tools(parse_plan(p.extract_json(r))),
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

    def _pump(self) -> None:
        """Start what can start; once blocked and idle, replan or fail; else maybe finish."""
        if self.finished or self.plan is None or self._replanning:
            return
        if self._blocked is None:
            self._schedule()
            limit = self.plan.max_parallel or self.config.max_parallel
            while self._queue and self._active < limit:
                inst = self._queue.pop(0)
                inst.state = "active"
                self._active += 1
                self._begin(inst)
        if self._blocked is not None:
            if self._active == 0:
                kind, reason = self._blocked
                self._blocked = None
                self._replan(reason) if kind == "replan" else self._fail(reason)
        elif self._active == 0 and all(s.status in FINISHED for s in self.steps.values()):
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
            self._step_failed(step, state, str(exc))
            return
        if items is not None and len(items) > self.config.max_fanout:
            self._step_failed(step, state, f"foreach gives {len(items)} items, more than the "
                              f"limit of {self.config.max_fanout}")
            return
        if items == []:
            self._skip(step, state, f"foreach {step.foreach!r} is an empty list")
            return
        state.status = "running"
        state.instances = instances_for(step, items)
        self._queue.extend(state.instances)

    def _step_failed(self, step: Step, state: StepState, reason: str) -> None:
        state.status, state.reason = "failed", reason
        self._block("replan", f"step {step.id!r}: {reason}")

    def _skip(self, step: Step, state: StepState, reason: str) -> None:
        state.status, state.reason = "skipped", reason
        self._issue(SkipStep, Decision("skip", reason, step.id), step_id=step.id)

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
        except (ExpressionError, PlanError) as exc:
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
        self.files.update(workspace_files(obs.files, obs.file_bytes))
        if obs.ok:
            self._on_success(step, inst, obs.output())
            return
        error = failure_text(obs, inst.code or "")
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
            self._fix(inst, error, f"when it ran (attempt {self._executions[inst.key]})")
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
            lambda r: self._checked_replan(merge_replan(old, p.extract_json(r), finished,
                                                        version)),
            lambda merged: self._adopt(merged[0], reason, merged[1], finished),
            Decision("replan", f"{reason}; ask the model for plan v{version} "
                     f"({self._replans}/{self.config.max_replans})"),
        )

    def _checked_replan(self, merged: tuple[Plan, tuple[Decision, ...]]
                        ) -> tuple[Plan, tuple[Decision, ...]]:
        self._known_tools(merged[0])
        return merged

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
        found = excerpts(self.plan, outputs)
        if found and answer is not None:
            answer = f"{answer}\n\n{excerpt_note(found)}"
        skipped = sum(1 for s in self.steps.values() if s.status == "skipped")
        why = Decision("finish", f"all {len(self.steps)} steps of plan v{self.version} finished "
                       f"({skipped} skipped)")
        self.result = self._issue(Finish, why, ok=True, answer=answer, outputs=outputs,
                                  excerpts=tuple(found))

    def _fail(self, reason: str) -> None:
        self.result = self._issue(Finish, Decision("fail", reason), ok=False, error=reason)

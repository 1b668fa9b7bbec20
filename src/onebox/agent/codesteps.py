"""Code written at run time: ask the model, pre-check the code cheaply, fix it on failure.

Python must ``compile()``; bash and node code go through a :class:`CheckCode` action
(``bash -n`` / ``node --check``). A failing check or a failing run goes back to the model
with the error, a bounded number of times. A fan-out asks for its code once.
"""

from __future__ import annotations

from typing import Any

from onebox.agent import prompting as p
from onebox.agent.actions import CallModel, CheckCode, CheckResult, Decision, ModelReply
from onebox.agent.context import environment_text
from onebox.agent.machine import AgentBase
from onebox.agent.plan import Step
from onebox.agent.state import Instance


class CodeSteps(AgentBase):
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
        request = p.code_request(step, self.request, deps, loop, self.config.prompt_output_chars,
                                 environment_text(self.facts, self.files))
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
        if not self.config.use_model:
            self._execute(inst)
            return
        if step.tool == "python":
            error = _compiles(code)
            self._execute(inst) if error is None else self._code_rejected(inst, error)
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
        self._fix(inst, error, "in its syntax check, before running")

    def _fix(self, inst: Instance, error: str, when: str) -> None:
        if self._blocked:
            self._abandon(inst)
            return
        step = self._step(inst.step_id)
        request = p.fix_request(step, inst.code or "", error, when)
        why = Decision("fix", f"failed {when}: {error.splitlines()[0] if error else 'error'}; "
                       "ask the model to fix the code", inst.key)
        self._ask_code([inst], "fix_code", request, why)


def _compiles(code: str) -> str | None:
    """None if the Python code compiles, else the SyntaxError as text."""
    try:
        compile(code, "<step>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return f"SyntaxError: {exc.msg} (line {exc.lineno})"
    except ValueError as exc:
        return f"invalid source: {exc}"
    return None

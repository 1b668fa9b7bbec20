"""The agent on the engine: task runs and plans the graph alone cannot schedule.

Owns submitting such a run (``runs``), rebuilding its agent from the run's log and queueing
the actions it decides (``engine``), performing each action on a worker (``steps``: model
calls recorded in ``llm_calls`` by :mod:`onebox.model_calls`, code checks, tool lookups, sandboxed
code, knowledge), and its step kind (``runs.AGENT``). The pure decision logic lives in
:mod:`onebox.agent`.

May import: ``runtime.engine``, ``runtime.models``, ``runtime.environments``. Never
threads, services or e2b.
"""

"""The engine: durable runs on one queue.

Owns submission of a plan's graph (``submit``), claiming and leasing attempts (``queue``),
the worker that performs them (``worker``) through step kinds (``kinds``; its own is
``code_steps``: a plan's code step run in the sandbox by ``executor``), archiving an attempt
and advancing its run (``archive``), the event log and rebuilding a run from it (``event_log``,
``rebuild``), workspaces and the files a run takes in and gives out (``workspaces``,
``run_files``, ``run_outputs``), the watchdog of stalled runs and retention of old ones.

May import: ``runtime.models``, ``runtime.environments``, and the layers below the runtime
(agent's pure plan language, sandbox, store, objects, knowledge, llm). Never the agent on
the engine, threads, services, e2b: they plug in as step kinds and chores
(``onebox.step_kinds`` and ``onebox.chores`` entry points), the way a third party would.
"""

"""The services every door (API, CLI, MCP, the Python runtime) calls.

Runs (``submission``, ``run_service``, ``runs``, ``run_views``, ``explain``,
``workspace_diff``, ``console_views``), sandbox sessions (``session_service``,
``tenant_sessions``, ``cell_stream``, ``workspace_files``), API keys, schedules (whose
firing is a worker chore), doctor, metrics, and ``service.Runtime`` which holds the
database, sandbox and object store together.

May import every other room of the runtime; nothing of the runtime imports it except e2b.
"""

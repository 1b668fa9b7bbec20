"""E2B's sandbox model on onebox sessions: sandboxes (``sandboxes``), their scoped access
tokens (``tokens``), files (``files``) and commands (``commands``), served by
:mod:`onebox.api.e2b`.

May import: ``runtime.services``, ``runtime.engine``, ``runtime.environments``,
``runtime.models``. Never the agent or threads.
"""

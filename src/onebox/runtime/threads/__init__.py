"""Threads: conversations whose turns are agent runs that share a workspace and a memory.

Owns threads and their turns (``service``), the context a turn is given (``context``), and
a turn's upkeep after its answer (facts, then the summary: ``steps`` queues and archives
them, ``upkeep`` performs them and is the ``thread_upkeep`` step kind).

May import: ``runtime.engine``, ``runtime.agent``, ``runtime.models``. Never services or e2b.
"""

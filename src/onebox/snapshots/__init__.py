"""Snapshots recorded in the database, and replay: the layer above the sandbox.

The sandbox (``onebox.sandbox.snapshots``) captures and restores a workspace as
content-addressed objects and knows nothing of runs. This package ties those
captures to steps and sessions in PostgreSQL (:mod:`onebox.snapshots.archive`)
and replays a recorded step in a fresh session (:mod:`onebox.snapshots.replay`).
"""

"""Environments: package layers built once and mounted read-only into steps that name them
(``service``: declaring, building and resolving them; ``layers``: the layer files).

May import only the layers below the runtime; nothing of the runtime.
"""

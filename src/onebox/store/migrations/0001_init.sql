-- onebox 0001: the state machine and the event log.
CREATE SCHEMA IF NOT EXISTS onebox;

CREATE TABLE onebox.runs (
    id               uuid PRIMARY KEY,
    trace_id         char(32)    NOT NULL,
    status           text        NOT NULL DEFAULT 'PENDING'
                     CHECK (status IN ('PENDING','RUNNING','WAITING','SUCCEEDED','FAILED','CANCELLED','DEAD')),
    source           text        NOT NULL CHECK (source IN ('plan','task')),
    request          jsonb       NOT NULL,
    name             text,
    idempotency_key  text UNIQUE,
    current_plan_id  uuid,
    error            text,
    lease_owner      text,
    lease_expires_at timestamptz,
    fencing_token    bigint      NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz
);
CREATE INDEX runs_created_idx ON onebox.runs (created_at DESC);
CREATE INDEX runs_claimable_idx ON onebox.runs (status, lease_expires_at)
    WHERE status IN ('PENDING','RUNNING');

CREATE TABLE onebox.plans (
    id         uuid PRIMARY KEY,
    run_id     uuid        NOT NULL REFERENCES onebox.runs(id) ON DELETE CASCADE,
    version    int         NOT NULL CHECK (version >= 1),
    spec       jsonb       NOT NULL,
    spec_hash  char(64)    NOT NULL,
    reason     text,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, version)
);

CREATE TABLE onebox.sessions (
    id           text PRIMARY KEY,
    run_id       uuid REFERENCES onebox.runs(id) ON DELETE SET NULL,
    backend      text        NOT NULL,
    status       text        NOT NULL DEFAULT 'ACTIVE' CHECK (status IN ('ACTIVE','RELEASED','REAPED')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz NOT NULL DEFAULT now(),
    released_at  timestamptz
);

CREATE TABLE onebox.task_execution (
    id                uuid PRIMARY KEY,
    run_id            uuid        NOT NULL REFERENCES onebox.runs(id) ON DELETE CASCADE,
    plan_id           uuid        NOT NULL REFERENCES onebox.plans(id) ON DELETE CASCADE,
    session_id        text,
    trace_id          char(32)    NOT NULL,
    step_id           text        NOT NULL,
    step_number       int         NOT NULL,
    attempt           int         NOT NULL DEFAULT 1,
    tool_name         text        NOT NULL,
    input_hash        char(64)    NOT NULL,
    output_hash       char(64),
    status            text        NOT NULL
                      CHECK (status IN ('PENDING','RUNNING','SUCCESS','FAILED','TIMEOUT')),
    exit_code         int,
    duration_ms       double precision,
    memory_used_mb    double precision,
    cpu_usage_percent double precision,
    stdout            text,
    stderr            text,
    error             text,
    details           jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT output_hash_only_on_success CHECK (status = 'SUCCESS' OR output_hash IS NULL),
    UNIQUE (run_id, step_id, attempt)
);
CREATE INDEX task_execution_run_idx ON onebox.task_execution (run_id, step_number);

CREATE TABLE onebox.agent_events (
    seq        bigserial PRIMARY KEY,
    run_id     uuid REFERENCES onebox.runs(id) ON DELETE CASCADE,
    session_id text,
    trace_id   char(32),
    type       text        NOT NULL,
    payload    jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX agent_events_run_idx ON onebox.agent_events (run_id, seq);

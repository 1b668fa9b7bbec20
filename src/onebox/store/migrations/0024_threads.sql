-- Threads (issue 17): conversations of many turns. Each turn is a task run in the thread's
-- own sandbox session (its workspace persists between turns); the context of a turn is
-- built from the thread's summary, its memories and its last turns (onebox.runtime.threads).
CREATE TABLE onebox.threads (
    id               uuid        PRIMARY KEY,
    tenant_id        text        NOT NULL DEFAULT 'default',
    title            text        NOT NULL DEFAULT '',
    profile          text,
    session_id       text        NOT NULL,
    summary          text        NOT NULL DEFAULT '',
    summary_version  integer     NOT NULL DEFAULT 0,
    summarized_turns integer     NOT NULL DEFAULT 0,
    turns            integer     NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX threads_tenant ON onebox.threads (tenant_id, updated_at DESC);

-- One row per turn: its run, the message, what went into its context (memory ids, summary
-- version, token counts per part) and when the facts and summary were taken from it.
-- No foreign key to runs: retention may remove a run; the turn keeps what it said.
CREATE TABLE onebox.thread_turns (
    thread_id   uuid        NOT NULL REFERENCES onebox.threads (id) ON DELETE CASCADE,
    turn        integer     NOT NULL CHECK (turn >= 1),
    run_id      uuid        NOT NULL UNIQUE,
    message     text        NOT NULL,
    context     jsonb       NOT NULL,
    facts       jsonb,
    upkept_at   timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, turn)
);
CREATE INDEX thread_turns_pending ON onebox.thread_turns (thread_id) WHERE upkept_at IS NULL;

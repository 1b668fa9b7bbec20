-- Sessions reachable through every API server of one database.
--
-- A sandbox session's workspace and interpreter live on the API server that created it (its
-- holder). Each server records itself in api_servers (its address, a heartbeat), and each
-- session records its holder, so a request that reaches another server is routed to the
-- holder; a holder that stopped heartbeating is replaced (holder_epoch counts the moves, the
-- compare-and-set that moves a session checks it).
--
-- What E2B adds to a session (template, metadata, envs, deadline) lives on the session row,
-- so a restart does not forget it and two servers agree about it.
CREATE TABLE onebox.api_servers (
    id         text PRIMARY KEY,
    url        text        NOT NULL,
    host       text        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE onebox.sessions
    ADD COLUMN holder       text,
    ADD COLUMN holder_epoch bigint NOT NULL DEFAULT 0,
    ADD COLUMN e2b_template text,
    ADD COLUMN e2b_metadata jsonb,
    ADD COLUMN e2b_envs     jsonb,
    ADD COLUMN end_at       timestamptz;

CREATE INDEX sessions_end_at ON onebox.sessions (end_at)
    WHERE status = 'ACTIVE' AND end_at IS NOT NULL;
CREATE INDEX sessions_holder ON onebox.sessions (holder) WHERE status = 'ACTIVE';

-- onebox 0006: tenants on runs, schedules, and approvals waiting for a person.
ALTER TABLE onebox.runs ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
CREATE INDEX runs_tenant_created_idx ON onebox.runs (tenant_id, created_at DESC);
ALTER TABLE onebox.sessions ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';

-- A schedule submits its plan at every cron slot; (schedule_id, slot) is unique, so with
-- any number of workers each slot fires exactly once.
CREATE TABLE onebox.schedules (
    id         uuid PRIMARY KEY,
    tenant_id  text        NOT NULL DEFAULT 'default',
    name       text        NOT NULL,
    cron       text        NOT NULL,
    plan       jsonb       NOT NULL,
    enabled    boolean     NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    next_at    timestamptz NOT NULL,
    UNIQUE (tenant_id, name)
);
CREATE TABLE onebox.schedule_fires (
    schedule_id uuid        NOT NULL REFERENCES onebox.schedules(id) ON DELETE CASCADE,
    slot        timestamptz NOT NULL,
    run_id      uuid        REFERENCES onebox.runs(id) ON DELETE SET NULL,
    fired_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, slot)
);

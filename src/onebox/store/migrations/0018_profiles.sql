-- Agent profiles: which model (and endpoint) does a run's model work, with which defaults.
-- A run keeps a copy of the profile it was submitted with; model work is claimable only by
-- a worker that serves that model (task_execution.needs_model), never by another one.
CREATE TABLE onebox.profiles (
    tenant_id     text        NOT NULL DEFAULT 'default',
    name          text        NOT NULL,
    spec          jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name)
);

ALTER TABLE onebox.runs ADD COLUMN profile jsonb;
ALTER TABLE onebox.task_execution ADD COLUMN needs_model text;

-- onebox 0002: step-level queue. A task_execution row is one attempt of one step;
-- PENDING rows are the queue, claimed with FOR UPDATE SKIP LOCKED as a lease
-- (owner, expiry) with a fencing token bumped at every claim.
ALTER TABLE onebox.task_execution
    ADD COLUMN lease_owner      text,
    ADD COLUMN lease_expires_at timestamptz,
    ADD COLUMN fencing_token    bigint      NOT NULL DEFAULT 0,
    ADD COLUMN available_at     timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN max_attempts     int         NOT NULL DEFAULT 3,
    ADD COLUMN started_at       timestamptz,
    ADD COLUMN finished_at      timestamptz;

CREATE INDEX task_execution_queue_idx ON onebox.task_execution (available_at)
    WHERE status = 'PENDING';
CREATE INDEX task_execution_leases_idx ON onebox.task_execution (lease_expires_at)
    WHERE status = 'RUNNING';

ALTER TABLE onebox.agent_events ADD COLUMN execution_id uuid;

-- Indexes for the queries that run on every heartbeat, claim or metrics scrape (issue 12):
-- without them each one scans its whole table, and they run all the time.

-- finished_sessions (every heartbeat): the ACTIVE sessions, by run.
CREATE INDEX sessions_active_run_idx ON onebox.sessions (run_id) WHERE status = 'ACTIVE';
-- metrics_sessions (every scrape): ACTIVE sessions of a tenant.
CREATE INDEX sessions_active_tenant_idx ON onebox.sessions (tenant_id) WHERE status = 'ACTIVE';
-- finished_sessions: "no attempt of this session is RUNNING".
CREATE INDEX task_execution_running_session_idx ON onebox.task_execution (session_id)
    WHERE status = 'RUNNING';
-- delete_unshared_pre and snapshot retention: attempts that use a snapshot.
CREATE INDEX task_execution_snapshot_idx ON onebox.task_execution (snapshot_id)
    WHERE snapshot_id IS NOT NULL;
CREATE INDEX task_execution_pre_snapshot_idx ON onebox.task_execution (pre_snapshot_id)
    WHERE pre_snapshot_id IS NOT NULL;
-- metrics_blocked (every scrape): blocked egress events, by run.
CREATE INDEX agent_events_blocked_idx ON onebox.agent_events (run_id)
    WHERE type = 'BLOCKED_EXTERNAL_ACCESS';
-- claim_task_runs (every poll of every worker): task runs that may be claimed.
CREATE INDEX runs_task_claimable_idx ON onebox.runs (created_at)
    WHERE source = 'task' AND status IN ('PENDING', 'RUNNING');

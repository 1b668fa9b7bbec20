-- Figures for /metrics: the machine's load, and one tenant's own counts.

-- name: metrics_queue
SELECT count(*) FILTER (WHERE status = 'PENDING' AND waiting_for IS NULL) AS queued,
       count(*) FILTER (WHERE status = 'PENDING' AND waiting_for IS NOT NULL) AS waiting,
       count(*) FILTER (WHERE status = 'RUNNING') AS running
FROM onebox.task_execution WHERE status IN ('PENDING', 'RUNNING');

-- name: metrics_runs
SELECT status, count(*) AS n FROM onebox.runs WHERE tenant_id = %(tenant_id)s GROUP BY status;

-- name: metrics_durations
SELECT status, count(*) AS n, coalesce(sum(duration_ms), 0) AS total_ms,
       count(*) FILTER (WHERE duration_ms <= 10) AS le_10,
       count(*) FILTER (WHERE duration_ms <= 50) AS le_50,
       count(*) FILTER (WHERE duration_ms <= 100) AS le_100,
       count(*) FILTER (WHERE duration_ms <= 500) AS le_500,
       count(*) FILTER (WHERE duration_ms <= 1000) AS le_1000,
       count(*) FILTER (WHERE duration_ms <= 5000) AS le_5000,
       count(*) FILTER (WHERE duration_ms <= 30000) AS le_30000,
       count(*) FILTER (WHERE duration_ms <= 300000) AS le_300000
FROM onebox.task_execution t
WHERE status IN ('SUCCESS', 'FAILED', 'TIMEOUT') AND duration_ms IS NOT NULL
  AND t.run_id IN (SELECT id FROM onebox.runs WHERE tenant_id = %(tenant_id)s)
GROUP BY status;

-- name: metrics_blocked
SELECT count(*) AS n FROM onebox.agent_events
WHERE type = 'BLOCKED_EXTERNAL_ACCESS'
  AND run_id IN (SELECT id FROM onebox.runs WHERE tenant_id = %(tenant_id)s);

-- name: metrics_sessions
SELECT count(*) AS n FROM onebox.sessions WHERE status = 'ACTIVE' AND tenant_id = %(tenant_id)s;

-- name: ping
SELECT 1 AS ok;

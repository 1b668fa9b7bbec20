-- Live logs: the step_output events of a run (runtime/live_logs.py).

-- name: log_events
-- A run's live-log events after a seq, optionally of one step, in order.
SELECT seq, execution_id, type, payload
FROM onebox.agent_events
WHERE run_id = %(run_id)s AND seq > %(after)s
  AND type IN ('step_output', 'step_output_truncated')
  AND (%(step_id)s::text IS NULL OR payload->>'step_id' = %(step_id)s::text)
ORDER BY seq
LIMIT %(limit)s;

-- name: recent_output
-- The latest step_output events of some attempts, newest first.
SELECT seq, execution_id, payload
FROM onebox.agent_events
WHERE run_id = %(run_id)s AND type = 'step_output' AND execution_id = ANY(%(execution_ids)s)
ORDER BY seq DESC
LIMIT %(limit)s;

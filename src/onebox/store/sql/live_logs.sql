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

-- name: log_events_by_attempt
-- A run's live-log events (of one step when given), attempt after attempt in the order of
-- run_steps (step number, then time), each attempt's in seq order: streamed, the sort is
-- the server's.
SELECT e.seq, e.execution_id, e.type, e.payload, t.step_id, t.attempt
FROM onebox.agent_events e JOIN onebox.task_execution t ON t.id = e.execution_id
WHERE e.run_id = %(run_id)s AND t.run_id = %(run_id)s
  AND e.type IN ('step_output', 'step_output_truncated')
  AND (%(step_id)s::text IS NULL OR t.step_id = %(step_id)s::text)
ORDER BY t.step_number, t.created_at, t.attempt, t.id, e.seq;

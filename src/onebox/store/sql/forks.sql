-- Forking a run at a step (onebox.runtime.services.forks).

-- name: parent_attempts
-- The newest attempt of every step of the parent run, with its snapshots.
SELECT DISTINCT ON (step_id) id, step_id, attempt, status, output_hash, pre_snapshot_id,
       tool_name, input_hash
FROM onebox.task_execution WHERE run_id = %(run_id)s
ORDER BY step_id, attempt DESC;

-- name: inherit_attempt
-- A finished attempt of the parent, copied into the fork as its step's first attempt: the
-- same result, never executed again; details.inherited_from names the original.
WITH ins AS (
    INSERT INTO onebox.task_execution
        (id, run_id, plan_id, session_id, trace_id, step_id, step_number, attempt, tool_name,
         input_hash, output_hash, status, exit_code, duration_ms, memory_used_mb,
         cpu_usage_percent, stdout, stderr, stdout_bytes, stderr_bytes, error, details,
         max_attempts, available_at)
    SELECT %(id)s, %(run_id)s, %(plan_id)s, %(session_id)s, %(trace_id)s, p.step_id,
           %(step_number)s, 1, p.tool_name, p.input_hash, p.output_hash, p.status, p.exit_code,
           p.duration_ms, p.memory_used_mb, p.cpu_usage_percent, p.stdout, p.stderr,
           p.stdout_bytes, p.stderr_bytes, p.error,
           p.details || jsonb_build_object('inherited_from', p.id::text,
                                           'inherited_from_run', p.run_id::text),
           1, now()
    FROM onebox.task_execution p WHERE p.id = %(parent_id)s
    RETURNING id, run_id, session_id, trace_id, step_id
)
INSERT INTO onebox.agent_events (run_id, session_id, trace_id, execution_id, type, payload)
SELECT run_id, session_id, trace_id, id, 'step_inherited',
       jsonb_build_object('step_id', step_id, 'execution_id', id::text,
                          'from_execution_id', %(parent_id)s::text,
                          'from_run_id', %(parent_run)s::text)
FROM ins;

-- name: set_steps_left
UPDATE onebox.runs SET steps_left = %(steps_left)s WHERE id = %(run_id)s;

-- name: forks_of
SELECT id, status, request -> 'fork' ->> 'at' AS at, created_at FROM onebox.runs
WHERE tenant_id = %(tenant_id)s AND request -> 'fork' ->> 'run_id' = %(run_id)s
ORDER BY created_at;

-- name: agent_attempts
-- Every attempt of an agent run, oldest first, with the agent action it performed.
SELECT id, step_id, attempt, status, pre_snapshot_id, plan_id, step_number, tool_name,
       details ->> 'action_id' AS action_id
FROM onebox.task_execution WHERE run_id = %(run_id)s
ORDER BY attempt, created_at;

-- name: agent_log_upto
-- The agent's log up to entry ``upto`` (0: none), with what it said about the intent and
-- the steps it skipped: what a fork of the run keeps.
SELECT seq, type, payload FROM onebox.agent_events
WHERE run_id = %(run_id)s AND seq <= %(upto)s
  AND type IN ('agent_action', 'agent_observation', 'intent', 'step_skipped')
ORDER BY seq;

-- name: inherit_changes
-- The kept step's change set (all its attempts' composed), for its copy in the fork.
INSERT INTO onebox.workspace_changes
    (execution_id, run_id, session_id, step_id, position, changes, paths)
VALUES (%(id)s, %(run_id)s, %(session_id)s, %(step_id)s, %(position)s, %(changes)s,
        %(paths)s);

-- name: recorded_changes
-- How many of these attempts have a change set (runs before migration 0036 have none).
SELECT count(*) AS n FROM onebox.workspace_changes WHERE execution_id = ANY(%(ids)s);

-- Comparing two runs, replaying one (onebox.runtime.services.run_compare).

-- name: latest_attempts
-- Every step's newest attempt, in plan order, with its after-step snapshot.
SELECT DISTINCT ON (t.step_id) t.id, t.plan_id, t.step_id, t.step_number, t.attempt, t.status,
       t.tool_name, t.exit_code, t.output_hash, t.stdout, t.stderr, t.details,
       t.snapshot_id, s.sha256, s.status AS snapshot_status
FROM onebox.task_execution t
LEFT JOIN onebox.snapshots s ON s.id = t.snapshot_id
WHERE t.run_id = %(run_id)s
ORDER BY t.step_id, t.attempt DESC;

-- name: model_calls
-- The model calls of a run: what was asked (hashed) and answered, per step.
SELECT step_id, model, md5(messages::text) AS prompt_hash, md5(coalesce(response::text, '')) AS
       answer_hash, response, prompt_tokens, completion_tokens, cost_usd, error
FROM onebox.llm_calls WHERE run_id = %(run_id)s ORDER BY id;

-- name: execution_snapshots
-- An attempt's run and its before- and after-step snapshots (READY ones only).
SELECT t.id, t.run_id, pre.sha256 AS pre_sha256, post.sha256 AS post_sha256
FROM onebox.task_execution t
LEFT JOIN onebox.snapshots pre ON pre.id = t.pre_snapshot_id AND pre.status = 'READY'
LEFT JOIN onebox.snapshots post ON post.id = t.snapshot_id AND post.status = 'READY'
WHERE t.id = %(id)s;

-- name: replay_attempt
-- A code step re-executed by a replay, recorded in the replay's run: the original's row
-- with what the replay printed and returned; details.replay_of names the original and
-- details.match says whether it matched.
WITH ins AS (
    INSERT INTO onebox.task_execution
        (id, run_id, plan_id, session_id, trace_id, step_id, step_number, attempt, tool_name,
         input_hash, output_hash, status, exit_code, duration_ms, memory_used_mb, stdout,
         stderr, error, details, max_attempts, available_at, started_at, finished_at)
    SELECT %(id)s, %(run_id)s, %(plan_id)s, %(session_id)s, %(trace_id)s, p.step_id,
           p.step_number, 1, p.tool_name, p.input_hash, %(output_hash)s, %(status)s,
           %(exit_code)s, %(duration_ms)s, %(memory_used_mb)s, %(stdout)s, %(stderr)s,
           %(error)s,
           (p.details - 'files_written') || jsonb_build_object(
               'replay_of', p.id::text, 'replay_of_run', p.run_id::text,
               'match', %(match)s::boolean),
           1, now(), now(), now()
    FROM onebox.task_execution p WHERE p.id = %(original)s
    RETURNING id, run_id, session_id, trace_id, step_id
)
INSERT INTO onebox.agent_events (run_id, session_id, trace_id, execution_id, type, payload)
SELECT run_id, session_id, trace_id, id, 'step_replayed',
       jsonb_build_object('step_id', step_id, 'execution_id', id::text,
                          'from_execution_id', %(original)s::text, 'match', %(match)s::boolean)
FROM ins;

-- name: queue_replay_attempt
-- A code step a replay re-executes, queued in the replay's run for a worker to claim: the
-- original's row with details.replay_of naming the attempt whose inputs it re-runs (the
-- original's own, or the one a fork inherited it from) and no result yet; its step_queued
-- event and a wake-up for idle workers.
WITH ins AS (
    INSERT INTO onebox.task_execution
        (id, run_id, plan_id, session_id, trace_id, step_id, step_number, attempt, tool_name,
         input_hash, status, details, max_attempts, available_at)
    SELECT %(id)s, %(run_id)s, %(plan_id)s, %(session_id)s, %(trace_id)s, p.step_id,
           p.step_number, %(attempt)s, p.tool_name, p.input_hash, 'PENDING',
           (p.details - 'files_written' - 'action_id' - 'inherited_from'
                      - 'inherited_from_run' - 'match') || jsonb_build_object(
               'replay_of', %(original)s::text, 'replay_of_run', %(original_run)s::text),
           %(max_attempts)s, now()
    FROM onebox.task_execution p WHERE p.id = %(row)s
    RETURNING id, run_id, session_id, trace_id, step_id, step_number, attempt, input_hash,
              max_attempts
), ev AS (
    INSERT INTO onebox.agent_events (run_id, session_id, trace_id, execution_id, type, payload)
    SELECT run_id, session_id, trace_id, id, 'step_queued',
           jsonb_build_object('execution_id', id::text, 'step_id', step_id, 'attempt', attempt,
                              'step_number', step_number, 'input_hash', input_hash,
                              'max_attempts', max_attempts, 'replay_of', %(original)s::text)
    FROM ins
)
SELECT pg_notify('onebox_steps', '') FROM ins;

-- name: replay_rows_left
-- How many of a replay run's re-executions have not finished (queued or running).
SELECT count(*) AS n FROM onebox.task_execution
WHERE run_id = %(run_id)s AND status IN ('PENDING', 'RUNNING') AND details ? 'replay_of';

-- name: replay_report_rows
-- A replay run's steps (newest attempt of each) in plan order, for its report.
SELECT DISTINCT ON (t.step_id) t.id, t.step_id, t.step_number, t.attempt, t.status,
       t.tool_name, t.output_hash, t.error, t.details
FROM onebox.task_execution t
WHERE t.run_id = %(run_id)s
ORDER BY t.step_id, t.attempt DESC;

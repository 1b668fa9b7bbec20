-- Comparing two runs, replaying one (onebox.runtime.services.run_compare).

-- name: latest_attempts
-- Every step's newest attempt, in plan order, with its after-step snapshot.
SELECT DISTINCT ON (t.step_id) t.id, t.step_id, t.step_number, t.attempt, t.status,
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

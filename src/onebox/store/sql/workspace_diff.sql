-- Step attempts of a run with their workspace snapshots (see onebox.runtime.workspace_diff).
-- Every query is scoped to one run: a snapshot reached through another run's step is never
-- returned. The run's tenant is checked by the caller before.

-- name: execution
SELECT t.id, t.step_id, t.attempt, coalesce(t.started_at, t.created_at) AS started_at,
       t.snapshot_id, post.sha256 AS sha256, post.status AS snapshot_status,
       t.pre_snapshot_id, pre.sha256 AS pre_sha256, pre.status AS pre_status
FROM onebox.task_execution t
LEFT JOIN onebox.snapshots post ON post.id = t.snapshot_id
LEFT JOIN onebox.snapshots pre ON pre.id = t.pre_snapshot_id
WHERE t.run_id = %(run_id)s AND t.id = %(id)s;

-- name: latest
-- The run's newest step attempt whose after-step snapshot is READY.
SELECT t.id FROM onebox.task_execution t
JOIN onebox.snapshots post ON post.id = t.snapshot_id AND post.status = 'READY'
WHERE t.run_id = %(run_id)s
ORDER BY coalesce(t.started_at, t.created_at) DESC, t.step_number DESC, t.attempt DESC
LIMIT 1;

-- name: previous
-- The run's newest step attempt started before this one whose after-step snapshot is READY.
SELECT t.id FROM onebox.task_execution t
JOIN onebox.snapshots post ON post.id = t.snapshot_id AND post.status = 'READY'
WHERE t.run_id = %(run_id)s AND t.id <> %(id)s
  AND coalesce(t.started_at, t.created_at) < %(before)s
ORDER BY coalesce(t.started_at, t.created_at) DESC, t.step_number DESC, t.attempt DESC
LIMIT 1;

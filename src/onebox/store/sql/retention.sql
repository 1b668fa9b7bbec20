-- Retention: which runs are past their age or count, and removing them whole
-- (see onebox.runtime.retention). Terminal runs only; never one with an ACTIVE session.

-- name: try_lock
SELECT pg_try_advisory_lock(%(key)s) AS locked;

-- name: lock
SELECT pg_advisory_lock(%(key)s);

-- name: unlock
SELECT pg_advisory_unlock(%(key)s);

-- name: candidates
-- Terminal runs that ended more than max_age_s ago, or beyond the newest max_runs runs of
-- their tenant (every run counts toward max_runs; only terminal ones go). Oldest first;
-- NULL turns a rule off. Never a run with an ACTIVE session (its workspace is in use).
WITH picked AS (
    SELECT r.id, r.created_at FROM onebox.runs r
    WHERE %(max_age_s)s::float8 IS NOT NULL
      AND r.status IN ('SUCCEEDED', 'FAILED', 'DEAD', 'CANCELLED')
      AND coalesce(r.finished_at, r.updated_at)
          < now() - make_interval(secs => %(max_age_s)s::float8)
    UNION
    SELECT ranked.id, ranked.created_at FROM (
        SELECT r.id, r.created_at, r.status,
               row_number() OVER (PARTITION BY r.tenant_id
                                  ORDER BY r.created_at DESC, r.id DESC) AS n
        FROM onebox.runs r WHERE %(max_runs)s::int IS NOT NULL) ranked
    WHERE ranked.status IN ('SUCCEEDED', 'FAILED', 'DEAD', 'CANCELLED')
      AND ranked.n > %(max_runs)s::int)
SELECT p.id FROM picked p
WHERE NOT EXISTS (SELECT 1 FROM onebox.sessions s WHERE s.run_id = p.id AND s.status = 'ACTIVE')
ORDER BY p.created_at, p.id
LIMIT %(limit)s;

-- name: lock_runs
-- The candidates still terminal, locked against a retry or another pass (SKIP LOCKED).
SELECT r.id FROM onebox.runs r
WHERE r.id = ANY(%(ids)s::uuid[])
  AND r.status IN ('SUCCEEDED', 'FAILED', 'DEAD', 'CANCELLED')
  AND NOT EXISTS (SELECT 1 FROM onebox.sessions s WHERE s.run_id = r.id AND s.status = 'ACTIVE')
FOR UPDATE OF r SKIP LOCKED;

-- name: doomed_snapshots
-- The runs' snapshots (by session or by attempt) that no other run's attempt links to.
WITH attempts AS (
    SELECT id FROM onebox.task_execution WHERE run_id = ANY(%(ids)s::uuid[]))
SELECT sn.id FROM onebox.snapshots sn
WHERE (sn.session_id IN (SELECT s.id FROM onebox.sessions s WHERE s.run_id = ANY(%(ids)s::uuid[]))
       OR sn.execution_id IN (SELECT id FROM attempts))
  AND NOT EXISTS (SELECT 1 FROM onebox.task_execution t
                  WHERE (t.snapshot_id = sn.id OR t.pre_snapshot_id = sn.id)
                    AND NOT t.run_id = ANY(%(ids)s::uuid[]));

-- name: counts
-- What removing these runs removes, table by table.
SELECT
    (SELECT count(*) FROM onebox.agent_events WHERE run_id = ANY(%(ids)s::uuid[])) AS events,
    (SELECT count(*) FROM onebox.task_execution WHERE run_id = ANY(%(ids)s::uuid[])) AS attempts,
    (SELECT count(*) FROM onebox.plans WHERE run_id = ANY(%(ids)s::uuid[])) AS plans,
    (SELECT count(*) FROM onebox.llm_calls WHERE run_id = ANY(%(ids)s::uuid[])) AS llm_calls,
    (SELECT count(*) FROM onebox.sessions WHERE run_id = ANY(%(ids)s::uuid[])) AS sessions;

-- name: object_keys
-- The objects these snapshots reference that no other snapshot does, and the blobs of
-- these runs' files (still_referenced keeps those another run or upload names).
SELECT DISTINCT o.key FROM onebox.snapshot_objects o
WHERE o.snapshot_id = ANY(%(snapshot_ids)s::uuid[])
  AND NOT EXISTS (SELECT 1 FROM onebox.snapshot_objects other
                  WHERE other.key = o.key
                    AND NOT other.snapshot_id = ANY(%(snapshot_ids)s::uuid[]))
UNION
SELECT 'blobs/' || left(f.sha256, 2) || '/' || f.sha256 FROM onebox.run_files f
WHERE f.run_id = ANY(%(ids)s::uuid[]);

-- name: delete_snapshots
DELETE FROM onebox.snapshots WHERE id = ANY(%(snapshot_ids)s::uuid[]);

-- name: delete_sessions
DELETE FROM onebox.sessions WHERE run_id = ANY(%(ids)s::uuid[]) AND status <> 'ACTIVE';

-- name: delete_events
-- Events first, by their run index; the run's delete then cascades to the rest.
DELETE FROM onebox.agent_events WHERE run_id = ANY(%(ids)s::uuid[]);

-- name: delete_runs
DELETE FROM onebox.runs WHERE id = ANY(%(ids)s::uuid[]);

-- name: expire_uploads
-- Uploads older than their time to live: a run that named one holds its bytes as its own
-- input row (run_files), so only the upload row goes; its blob goes if nothing else uses it.
DELETE FROM onebox.uploads WHERE created_at < now() - make_interval(secs => %(ttl_s)s)
RETURNING 'blobs/' || left(sha256, 2) || '/' || sha256 AS key;

-- name: still_referenced
-- Of these keys, the ones a snapshot, a run's file or an upload references now (run under
-- the snapshot GC lock).
WITH wanted AS (SELECT k AS key, split_part(k, '/', 3) AS sha256
                FROM unnest(%(keys)s::text[]) k)
SELECT key FROM onebox.snapshot_objects WHERE key = ANY(%(keys)s::text[])
UNION SELECT w.key FROM wanted w
      WHERE w.key LIKE 'blobs/%%'
        AND (EXISTS (SELECT 1 FROM onebox.run_files f WHERE f.sha256 = w.sha256)
             OR EXISTS (SELECT 1 FROM onebox.uploads u WHERE u.sha256 = w.sha256));

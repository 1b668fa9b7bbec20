-- Workspace snapshots and the objects they reference (see onebox.store.snapshots).
-- Captures take the GC lock shared while registering their objects; the garbage
-- collector takes it exclusively while it decides what to delete.

-- name: lock_exclusive
SELECT pg_advisory_xact_lock(%(key)s);

-- name: register
-- One statement: take the GC lock shared, record the PENDING snapshot and every object
-- it references. The lock is held until this statement's transaction commits.
WITH gc_lock AS (SELECT pg_advisory_xact_lock_shared(%(key)s)),
snap AS (
    INSERT INTO onebox.snapshots
        (id, session_id, execution_id, kind, status, sha256, manifest_key, bytes, file_count,
         object_count)
    SELECT %(id)s, %(session_id)s, %(execution_id)s, %(kind)s, 'PENDING', %(sha256)s,
           %(manifest_key)s, %(bytes)s, %(file_count)s, %(object_count)s
    FROM gc_lock
    RETURNING id)
INSERT INTO onebox.snapshot_objects (snapshot_id, key)
SELECT snap.id, k FROM snap, unnest(%(keys)s::text[]) AS k;

-- name: stored_keys
-- Which of these keys a READY snapshot references: those objects are in the store (a
-- snapshot is READY only after its uploads). Run it in a statement *after* register
-- committed: its snapshot must not predate a garbage collection register waited for.
SELECT k AS key FROM unnest(%(keys)s::text[]) AS k
WHERE EXISTS (
    SELECT 1 FROM onebox.snapshot_objects o JOIN onebox.snapshots s ON s.id = o.snapshot_id
    WHERE o.key = k AND s.status = 'READY');

-- name: finish
-- One statement: mark the snapshot READY, link the step to it, append the event.
WITH ready AS (
    UPDATE onebox.snapshots
    SET status = 'READY', stored_bytes = %(stored_bytes)s, duration_ms = %(duration_ms)s,
        ready_at = now()
    WHERE id = %(id)s
    RETURNING id),
linked AS (
    UPDATE onebox.task_execution t
    SET snapshot_id = CASE WHEN %(pre)s THEN t.snapshot_id ELSE ready.id END,
        pre_snapshot_id = CASE WHEN %(pre)s THEN ready.id ELSE t.pre_snapshot_id END
    FROM ready
    WHERE t.id = %(execution_id)s
    RETURNING t.run_id, t.session_id, t.trace_id, ready.id AS snapshot_id),
event AS (
    INSERT INTO onebox.agent_events (run_id, session_id, trace_id, type, payload)
    SELECT run_id, session_id, trace_id, 'snapshot_taken',
           %(payload)s || jsonb_build_object('snapshot_id', snapshot_id::text)
    FROM linked)
SELECT (SELECT count(*) FROM ready) AS ready, (SELECT count(*) FROM linked) AS linked;

-- name: reuse
-- One statement: find a READY snapshot of the session with this hash (locked against
-- deletion), link the step to it, append the event.
WITH found AS (
    SELECT id FROM onebox.snapshots
    WHERE session_id = %(session_id)s AND sha256 = %(sha256)s AND status = 'READY'
    ORDER BY created_at DESC
    LIMIT 1
    FOR SHARE),
linked AS (
    UPDATE onebox.task_execution t
    SET snapshot_id = CASE WHEN %(pre)s THEN t.snapshot_id ELSE found.id END,
        pre_snapshot_id = CASE WHEN %(pre)s THEN found.id ELSE t.pre_snapshot_id END
    FROM found
    WHERE t.id = %(execution_id)s
    RETURNING t.run_id, t.session_id, t.trace_id, found.id AS snapshot_id),
event AS (
    INSERT INTO onebox.agent_events (run_id, session_id, trace_id, type, payload)
    SELECT run_id, session_id, trace_id, 'snapshot_taken',
           %(payload)s || jsonb_build_object('snapshot_id', snapshot_id::text)
    FROM linked)
SELECT (SELECT id FROM found) AS id, (SELECT count(*) FROM linked) AS linked;

-- name: delete_unshared_pre
DELETE FROM onebox.snapshots s
WHERE s.id = %(snapshot_id)s AND s.kind = 'pre' AND s.execution_id = %(execution_id)s
  AND NOT EXISTS (
      SELECT 1 FROM onebox.task_execution t
      WHERE t.id <> %(execution_id)s
        AND (t.pre_snapshot_id = s.id OR t.snapshot_id = s.id));

-- name: delete_snapshot
DELETE FROM onebox.snapshots WHERE id = %(id)s;

-- name: get
SELECT * FROM onebox.snapshots WHERE id = %(id)s;

-- name: by_prefix
SELECT * FROM onebox.snapshots WHERE id::text LIKE %(prefix)s || '%%' ORDER BY created_at LIMIT 2;

-- name: list
-- Filters are optional (NULL = any). A step's snapshots are the ones it created and the
-- ones it links to (a reused snapshot was created by an earlier step).
WITH steps AS (
    SELECT t.id, t.snapshot_id, t.pre_snapshot_id FROM onebox.task_execution t
    WHERE (%(execution_id)s::uuid IS NOT NULL OR %(run_id)s::uuid IS NOT NULL)
      AND (%(execution_id)s::uuid IS NULL OR t.id = %(execution_id)s)
      AND (%(run_id)s::uuid IS NULL OR t.run_id = %(run_id)s))
SELECT s.* FROM onebox.snapshots s
WHERE (%(session_id)s::text IS NULL OR s.session_id = %(session_id)s)
  AND ((%(execution_id)s::uuid IS NULL AND %(run_id)s::uuid IS NULL)
       OR s.execution_id IN (SELECT id FROM steps)
       OR s.id IN (SELECT snapshot_id FROM steps UNION SELECT pre_snapshot_id FROM steps))
ORDER BY s.created_at DESC, s.id
LIMIT %(limit)s;

-- name: execution
SELECT id, run_id, session_id, step_id, attempt, status, exit_code, output_hash, stdout,
       stderr, details, snapshot_id, pre_snapshot_id, created_at,
       coalesce(started_at, created_at) AS started_at
FROM onebox.task_execution WHERE id = %(id)s;

-- name: latest_before
SELECT * FROM onebox.snapshots
WHERE session_id = %(session_id)s AND status = 'READY' AND created_at < %(before)s
ORDER BY created_at DESC
LIMIT 1;

-- name: referenced_keys
-- Snapshot objects, and the blobs of runs' input/output files and of uploads.
SELECT key FROM onebox.snapshot_objects
UNION SELECT 'blobs/' || left(coalesce(data_sha256, sha256), 2) || '/'
             || coalesce(data_sha256, sha256) FROM onebox.run_files
UNION SELECT 'blobs/' || left(sha256, 2) || '/' || sha256 FROM onebox.uploads;

-- name: expected_keys
-- Every object the database says is stored: those of READY snapshots, and the blobs of
-- runs' files and of uploads (onebox doctor compares them with the store).
SELECT o.key FROM onebox.snapshot_objects o JOIN onebox.snapshots s ON s.id = o.snapshot_id
WHERE s.status = 'READY'
UNION SELECT 'blobs/' || left(coalesce(data_sha256, sha256), 2) || '/'
             || coalesce(data_sha256, sha256) FROM onebox.run_files
UNION SELECT 'blobs/' || left(sha256, 2) || '/' || sha256 FROM onebox.uploads;

-- name: expire
DELETE FROM onebox.snapshots s
WHERE (s.status = 'PENDING' AND s.created_at < now() - make_interval(secs => %(pending_grace_s)s))
   OR (s.status = 'READY' AND %(ttl_s)s::float8 IS NOT NULL
       AND s.created_at < now() - make_interval(secs => %(ttl_s)s::float8))
   OR (s.status = 'READY' AND %(keep_last)s::int > 0 AND s.id IN (
        SELECT id FROM (
            SELECT id, row_number() OVER (PARTITION BY session_id
                                          ORDER BY created_at DESC, id DESC) AS n
            FROM onebox.snapshots WHERE status = 'READY') ranked
        WHERE n > %(keep_last)s::int))
RETURNING s.id;


-- name: concurrent_writes
-- Other attempts in the same session whose run time overlapped this one's, with the
-- files they wrote: their writes can show up in this step's workspace and records.
SELECT o.id, o.step_id, o.details -> 'files_written' AS files_written
FROM onebox.task_execution t
JOIN onebox.task_execution o ON o.session_id = t.session_id AND o.id <> t.id
WHERE t.id = %(id)s AND t.started_at IS NOT NULL AND o.started_at IS NOT NULL
  AND o.started_at < coalesce(t.finished_at, now())
  AND coalesce(o.finished_at, now()) > t.started_at
ORDER BY o.started_at;

-- name: latest_commit
-- The session's head: what its steps committed so far (see migration 0033).
SELECT * FROM onebox.snapshots
WHERE session_id = %(session_id)s AND committed_at IS NOT NULL
ORDER BY committed_at DESC
LIMIT 1;

-- name: lock_session_commits
-- Held until the transaction ends: one step of a session commits onto its head at a time.
SELECT pg_advisory_xact_lock(hashtextextended('onebox.session-commit:' || %(session_id)s, 0));

-- name: commit
-- The snapshot becomes the session's head (a 'merge' one becomes READY at the same time).
UPDATE onebox.snapshots
SET committed_at = clock_timestamp(), status = 'READY', ready_at = coalesce(ready_at, now())
WHERE id = %(id)s
RETURNING id, committed_at;

-- name: object_keys
SELECT key FROM onebox.snapshot_objects WHERE snapshot_id = %(id)s ORDER BY key;

-- name: record_changes
-- An archived attempt's change set (written again, the same, when its archive is retried).
INSERT INTO onebox.workspace_changes
    (execution_id, run_id, session_id, step_id, position, changes, paths)
VALUES (%(execution_id)s, %(run_id)s, %(session_id)s, %(step_id)s, %(position)s,
        %(changes)s, %(paths)s)
ON CONFLICT (execution_id) DO UPDATE SET changes = EXCLUDED.changes, paths = EXCLUDED.paths;

-- name: run_changes
-- Every archived attempt of the run that has a change set (a fenced attempt has none); the
-- sets themselves are read by id (changes_of), once per process.
SELECT c.step_id, c.position, c.execution_id, c.paths, t.attempt
FROM onebox.workspace_changes c JOIN onebox.task_execution t ON t.id = c.execution_id
WHERE c.run_id = %(run_id)s
ORDER BY c.position, c.step_id, t.attempt;

-- name: changes_of
SELECT execution_id, changes FROM onebox.workspace_changes WHERE execution_id = ANY(%(ids)s);

-- name: step_changes
-- Every archived attempt's change set of one step of a run, oldest first.
SELECT c.changes FROM onebox.workspace_changes c
JOIN onebox.task_execution t ON t.id = c.execution_id
WHERE t.run_id = %(run_id)s AND t.step_id = %(step_id)s
ORDER BY t.attempt;

-- name: run_base
-- What the run's steps start from: the session's newest committed snapshot that none of the
-- run's own attempts made (a fork's or a thread's starting point, the run's inputs).
SELECT s.* FROM onebox.snapshots s
WHERE s.session_id = %(session_id)s AND s.committed_at IS NOT NULL AND s.status = 'READY'
  AND (s.execution_id IS NULL OR NOT EXISTS (
      SELECT 1 FROM onebox.task_execution t
      WHERE t.id = s.execution_id AND t.run_id = %(run_id)s))
ORDER BY s.committed_at DESC
LIMIT 1;

-- name: untracked_steps
-- Code steps of the run that ran (an exit code) and were archived without a change set: by a
-- worker without an object store, or before migration 0036. Only the copy they ran on knows
-- their files.
SELECT DISTINCT t.step_id FROM onebox.task_execution t
WHERE t.run_id = %(run_id)s AND t.tool_name IN ('python', 'bash', 'node')
  AND t.status IN ('SUCCESS', 'FAILED', 'TIMEOUT') AND t.exit_code IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM onebox.workspace_changes c WHERE c.execution_id = t.id);

-- A run's input and output files. See onebox.runtime.run_files.

-- name: insert_run_file
INSERT INTO onebox.run_files (run_id, kind, path, sha256, size_bytes, step_id, execution_id,
                             extents, data_sha256)
VALUES (%(run_id)s, %(kind)s, %(path)s, %(sha256)s, %(size_bytes)s, %(step_id)s,
        %(execution_id)s, %(extents)s, %(data_sha256)s)
ON CONFLICT (run_id, kind, path) DO NOTHING;

-- name: run_files
SELECT kind, path, sha256, size_bytes, step_id, execution_id, created_at
FROM onebox.run_files WHERE run_id = %(run_id)s AND kind = %(kind)s ORDER BY path;

-- name: run_file
SELECT kind, path, sha256, size_bytes, step_id, execution_id, created_at, extents, data_sha256
FROM onebox.run_files WHERE run_id = %(run_id)s AND kind = %(kind)s AND path = %(path)s;

-- name: insert_upload
INSERT INTO onebox.uploads (id, tenant_id, path, sha256, size_bytes)
VALUES (%(id)s, %(tenant_id)s, %(path)s, %(sha256)s, %(size_bytes)s);

-- name: tenant_uploads
SELECT id, path, sha256, size_bytes FROM onebox.uploads
WHERE tenant_id = %(tenant_id)s AND id = ANY(%(ids)s);

-- name: last_writing_step
SELECT id, step_id, details->'files_written' AS files FROM onebox.task_execution
WHERE run_id = %(run_id)s AND status = 'SUCCESS'
  AND EXISTS (SELECT 1 FROM jsonb_array_elements(coalesce(details->'files_written',
                                                         '[]'::jsonb)) f
              WHERE f->>'change' <> 'deleted' AND f->>'path' NOT LIKE '.onebox/%%')
ORDER BY finished_at DESC NULLS LAST, step_number DESC LIMIT 1;

-- name: lock_gc_shared
-- Held while a blob is stored and the row naming it is written: the snapshot and
-- retention GC (exclusive) never sees the blob without its row.
SELECT pg_advisory_xact_lock_shared(%(key)s);

-- name: declared_outputs
-- The deliverables the run's plan declares (its `outputs:`), if any.
SELECT coalesce(p.spec->'outputs', r.request->'plan'->'outputs') AS outputs
FROM onebox.runs r LEFT JOIN onebox.plans p ON p.id = r.current_plan_id
WHERE r.id = %(run_id)s;

-- name: writing_steps
-- The run's successful attempts, newest first, with the files each wrote.
SELECT id, step_id, details->'files_written' AS files FROM onebox.task_execution
WHERE run_id = %(run_id)s AND status = 'SUCCESS'
ORDER BY finished_at DESC NULLS LAST, step_number DESC LIMIT 1000;

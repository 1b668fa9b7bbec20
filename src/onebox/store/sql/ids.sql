-- Ids by a prefix, as `git` finds commits: the caller turns the prefix into the range of
-- every id that starts with it, so the primary key index answers without a scan.

-- name: run_ids_between
SELECT id FROM onebox.runs
WHERE id BETWEEN %(lo)s AND %(hi)s
  AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
ORDER BY id
LIMIT %(limit)s;

-- name: execution_ids_between
SELECT t.id FROM onebox.task_execution t
JOIN onebox.runs r ON r.id = t.run_id
WHERE t.id BETWEEN %(lo)s AND %(hi)s
  AND (%(tenant_id)s::text IS NULL OR r.tenant_id = %(tenant_id)s)
ORDER BY t.id
LIMIT %(limit)s;

-- name: thread_ids_between
SELECT id FROM onebox.threads
WHERE id BETWEEN %(lo)s AND %(hi)s
  AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
ORDER BY id
LIMIT %(limit)s;

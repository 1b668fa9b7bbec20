-- Sandbox sessions a tenant opened by hand, and the snapshots a tenant may read.

-- name: lock_tenant_sessions
-- Held until the transaction ends: a tenant's concurrent opens are counted one at a time.
SELECT pg_advisory_xact_lock(hashtextextended('onebox.sessions:' || %(tenant_id)s, 0));

-- name: insert_session
-- Only while the tenant holds fewer than its share of live sessions (no row: refused); run
-- under lock_tenant_sessions, so concurrent opens cannot all see the same count.
INSERT INTO onebox.sessions (id, backend, tenant_id, holder, owner, e2b_template,
                             e2b_metadata, e2b_envs, end_at)
SELECT %(id)s, %(backend)s, %(tenant_id)s, %(holder)s, %(owner)s, %(e2b_template)s,
       %(e2b_metadata)s, %(e2b_envs)s, now() + make_interval(secs => %(timeout_s)s)
WHERE (SELECT count(*) FROM onebox.sessions
       WHERE tenant_id = %(tenant_id)s AND status = 'ACTIVE') < %(max_live)s
RETURNING id, tenant_id, backend, status, created_at, last_used_at, released_at;

-- name: tenant_session
SELECT id, tenant_id, backend, status, created_at, last_used_at, released_at
FROM onebox.sessions WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND status = 'ACTIVE';

-- name: list_sessions
SELECT id, tenant_id, backend, status, created_at, last_used_at, released_at
FROM onebox.sessions
WHERE tenant_id = %(tenant_id)s AND status = 'ACTIVE' AND run_id IS NULL
ORDER BY created_at DESC LIMIT %(limit)s;

-- name: touch_session
UPDATE onebox.sessions SET last_used_at = now() WHERE id = %(id)s RETURNING id;

-- name: release_session
UPDATE onebox.sessions SET status = 'RELEASED', released_at = now()
WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND status = 'ACTIVE'
RETURNING id;

-- name: tenant_snapshots
SELECT s.id, s.session_id, s.execution_id, s.kind, s.status, s.sha256, s.bytes, s.stored_bytes,
       s.file_count, s.object_count, s.duration_ms, s.created_at, t.run_id
FROM onebox.snapshots s
LEFT JOIN onebox.task_execution t ON t.id = s.execution_id
LEFT JOIN onebox.runs r ON r.id = t.run_id
LEFT JOIN onebox.sessions ss ON ss.id = s.session_id
WHERE coalesce(r.tenant_id, ss.tenant_id) = %(tenant_id)s
  AND (%(run_id)s::uuid IS NULL OR t.run_id = %(run_id)s::uuid)
  AND (%(session_id)s::text IS NULL OR s.session_id = %(session_id)s::text)
ORDER BY s.created_at DESC
LIMIT %(limit)s;

-- name: tenant_snapshot
SELECT s.id, s.session_id, s.execution_id, s.kind, s.status, s.sha256, s.bytes, s.stored_bytes,
       s.file_count, s.object_count, s.duration_ms, s.created_at, t.run_id
FROM onebox.snapshots s
LEFT JOIN onebox.task_execution t ON t.id = s.execution_id
LEFT JOIN onebox.runs r ON r.id = t.run_id
LEFT JOIN onebox.sessions ss ON ss.id = s.session_id
WHERE s.id = %(id)s AND coalesce(r.tenant_id, ss.tenant_id) = %(tenant_id)s;

-- name: e2b_session
-- The tenant's live session with what E2B adds to it (none for a /v1/sessions one).
SELECT id, tenant_id, created_at, e2b_template, e2b_metadata, e2b_envs, end_at
FROM onebox.sessions WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND status = 'ACTIVE';

-- name: e2b_sessions
-- The tenant's live hand-made sessions whose E2B metadata holds every pair of %(metadata)s.
SELECT id, tenant_id, created_at, e2b_template, e2b_metadata, e2b_envs, end_at
FROM onebox.sessions
WHERE tenant_id = %(tenant_id)s AND status = 'ACTIVE' AND run_id IS NULL
  AND (%(metadata)s::jsonb = '{}'::jsonb OR e2b_metadata @> %(metadata)s::jsonb)
ORDER BY created_at DESC LIMIT %(limit)s;

-- name: set_end_at
UPDATE onebox.sessions SET end_at = now() + make_interval(secs => %(timeout_s)s)
WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND status = 'ACTIVE'
RETURNING id, tenant_id, created_at, e2b_template, e2b_metadata, e2b_envs, end_at;

-- name: extend_end_at
-- E2B's connect(timeout): the session ends no sooner than %(timeout_s)s from now, never sooner
-- than it already would.
UPDATE onebox.sessions
SET end_at = GREATEST(end_at, now() + make_interval(secs => %(timeout_s)s))
WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND status = 'ACTIVE'
RETURNING id, tenant_id, created_at, e2b_template, e2b_metadata, e2b_envs, end_at;

-- name: expired_sessions
-- Live sessions past their deadline that this server may end: its own, unheld ones, and
-- those whose holder stopped heartbeating (their row is released; that holder's sweep
-- removes its copy when it comes back).
SELECT s.id, s.tenant_id, s.holder
FROM onebox.sessions s
LEFT JOIN onebox.api_servers a ON a.id = s.holder
WHERE s.status = 'ACTIVE' AND s.end_at <= now()
  AND (s.holder IS NULL OR s.holder = %(me)s OR a.id IS NULL
       OR a.seen_at < now() - make_interval(secs => %(lease_s)s))
ORDER BY s.end_at LIMIT 200;

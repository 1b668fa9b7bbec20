-- The HTTP API's own queries: API keys, and tenant-scoped reads of runs, sessions and snapshots.

-- name: insert_key
INSERT INTO onebox.api_keys (id, tenant_id, name, key_hash, prefix)
VALUES (%(id)s, %(tenant_id)s, %(name)s, %(key_hash)s, %(prefix)s)
RETURNING id, tenant_id, name, prefix, created_at, last_used_at, revoked_at;

-- name: list_keys
SELECT id, tenant_id, name, prefix, created_at, last_used_at, revoked_at
FROM onebox.api_keys
WHERE (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
ORDER BY created_at;

-- name: revoke_key
UPDATE onebox.api_keys SET revoked_at = now()
WHERE (id::text = %(ref)s OR prefix = %(ref)s) AND revoked_at IS NULL
RETURNING id, tenant_id, name, prefix, created_at, last_used_at, revoked_at;

-- name: authenticate
WITH k AS (
    SELECT id, tenant_id, name, prefix, last_used_at FROM onebox.api_keys
    WHERE key_hash = %(key_hash)s AND revoked_at IS NULL
), touched AS (
    UPDATE onebox.api_keys a SET last_used_at = now()
    FROM k WHERE a.id = k.id
      AND (k.last_used_at IS NULL OR k.last_used_at < now() - interval '30 seconds')
    RETURNING a.id
)
SELECT k.id, k.tenant_id, k.name, k.prefix FROM k;

-- name: count_keys
SELECT count(*) AS n FROM onebox.api_keys WHERE revoked_at IS NULL;

-- name: key_active
SELECT EXISTS (SELECT 1 FROM onebox.api_keys WHERE id = %(id)s AND revoked_at IS NULL) AS active;

-- name: run_tenant
SELECT tenant_id FROM onebox.runs WHERE id = %(run_id)s;

-- name: search_runs
SELECT r.id, r.name, r.status, r.source, r.tenant_id, r.trace_id, r.error, r.created_at,
       r.updated_at, r.started_at, r.finished_at,
       (SELECT count(DISTINCT step_id) FROM onebox.task_execution t WHERE t.run_id = r.id)
           AS steps_started,
       (SELECT count(*) FROM onebox.task_execution t
         WHERE t.run_id = r.id AND t.status = 'SUCCESS') AS steps_succeeded
FROM onebox.runs r
WHERE r.tenant_id = %(tenant_id)s
  AND (%(statuses)s::text[] IS NULL OR r.status = ANY(%(statuses)s::text[]))
  AND (%(since)s::timestamptz IS NULL OR r.created_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR r.created_at < %(until)s::timestamptz)
  AND (%(text)s::text IS NULL
       OR r.name ILIKE '%%' || %(text)s || '%%'
       OR r.id::text LIKE %(text)s || '%%'
       OR r.request::text ILIKE '%%' || %(text)s || '%%')
  AND (%(before)s::timestamptz IS NULL OR r.created_at < %(before)s::timestamptz)
ORDER BY r.created_at DESC
LIMIT %(limit)s;

-- name: plan_versions
SELECT id, version, spec, spec_hash, reason, created_at
FROM onebox.plans WHERE run_id = %(run_id)s ORDER BY version;

-- name: run_llm_calls
SELECT id, step_id, action_id, purpose, model, response, prompt_tokens, completion_tokens,
       latency_ms, error, created_at
FROM onebox.llm_calls WHERE run_id = %(run_id)s ORDER BY id;

-- name: run_warning_events
SELECT seq, type, execution_id, payload, created_at FROM onebox.agent_events
WHERE run_id = %(run_id)s
  AND type IN ('BLOCKED_EXTERNAL_ACCESS', 'step_lease_expired', 'workspace_restored')
ORDER BY seq;

-- name: step_execution
SELECT t.* FROM onebox.task_execution t
WHERE t.id = %(execution_id)s AND t.run_id = %(run_id)s;

-- name: insert_session
INSERT INTO onebox.sessions (id, backend, tenant_id) VALUES (%(id)s, %(backend)s, %(tenant_id)s)
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
UPDATE onebox.sessions SET last_used_at = now() WHERE id = %(id)s;

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

-- name: event_horizon
-- The sequence's last value, the database clock after reading it, and the transaction ids
-- running now with their start times (any database, any role onebox connects as): a
-- snapshot's xip omits running ids above its xmax, this does not.
SELECT s.last_value, s.is_called, extract(epoch FROM clock_timestamp())::float8 AS at_s,
       (SELECT coalesce(jsonb_object_agg(a.backend_xid::text,
                                         coalesce(extract(epoch FROM a.xact_start), 0)), '{}')
        FROM pg_stat_activity AS a WHERE a.backend_xid IS NOT NULL) AS running
FROM onebox.agent_events_seq_seq AS s;

-- name: events_between
SELECT seq, run_id, session_id, trace_id, execution_id, type, payload, created_at
FROM onebox.agent_events WHERE seq > %(after)s AND seq <= %(upto)s ORDER BY seq;

-- name: run_events_between
SELECT seq, run_id, session_id, trace_id, execution_id, type, payload, created_at
FROM onebox.agent_events
WHERE run_id = %(run_id)s AND seq > %(after)s AND seq <= %(upto)s ORDER BY seq
LIMIT %(limit)s;

-- name: metrics_queue
SELECT count(*) FILTER (WHERE status = 'PENDING' AND waiting_for IS NULL) AS queued,
       count(*) FILTER (WHERE status = 'PENDING' AND waiting_for IS NOT NULL) AS waiting,
       count(*) FILTER (WHERE status = 'RUNNING') AS running
FROM onebox.task_execution WHERE status IN ('PENDING', 'RUNNING');

-- name: metrics_runs
SELECT status, count(*) AS n FROM onebox.runs WHERE tenant_id = %(tenant_id)s GROUP BY status;

-- name: metrics_durations
SELECT status, count(*) AS n, coalesce(sum(duration_ms), 0) AS total_ms,
       count(*) FILTER (WHERE duration_ms <= 10) AS le_10,
       count(*) FILTER (WHERE duration_ms <= 50) AS le_50,
       count(*) FILTER (WHERE duration_ms <= 100) AS le_100,
       count(*) FILTER (WHERE duration_ms <= 500) AS le_500,
       count(*) FILTER (WHERE duration_ms <= 1000) AS le_1000,
       count(*) FILTER (WHERE duration_ms <= 5000) AS le_5000,
       count(*) FILTER (WHERE duration_ms <= 30000) AS le_30000,
       count(*) FILTER (WHERE duration_ms <= 300000) AS le_300000
FROM onebox.task_execution t
WHERE status IN ('SUCCESS', 'FAILED', 'TIMEOUT') AND duration_ms IS NOT NULL
  AND t.run_id IN (SELECT id FROM onebox.runs WHERE tenant_id = %(tenant_id)s)
GROUP BY status;

-- name: metrics_blocked
SELECT count(*) AS n FROM onebox.agent_events
WHERE type = 'BLOCKED_EXTERNAL_ACCESS'
  AND run_id IN (SELECT id FROM onebox.runs WHERE tenant_id = %(tenant_id)s);

-- name: metrics_sessions
SELECT count(*) AS n FROM onebox.sessions WHERE status = 'ACTIVE' AND tenant_id = %(tenant_id)s;

-- name: tenant_collections
SELECT k.name, k.embedding_model, k.embedding_dim, k.created_at,
       (SELECT count(*) FROM onebox.kb_documents d WHERE d.collection = k.name) AS documents
FROM onebox.kb_collections k
WHERE left(k.name, length(%(prefix)s)) = %(prefix)s
ORDER BY k.name;

-- name: tenant_documents
SELECT id, collection, source, source_type, title, n_chunks, metadata, created_at, updated_at
FROM onebox.kb_documents
WHERE left(collection, length(%(prefix)s)) = %(prefix)s
  AND (%(collection)s::text IS NULL OR collection = %(collection)s)
ORDER BY collection, source
LIMIT %(limit)s;

-- name: tenant_document
SELECT id, collection, source FROM onebox.kb_documents
WHERE id = %(id)s AND left(collection, length(%(prefix)s)) = %(prefix)s;

-- name: tenant_memories
SELECT id, scope, user_id, kind, content, summary, metadata, created_at, valid_from, invalid_at,
       superseded_by, access_count
FROM onebox.memories
WHERE left(scope, length(%(prefix)s)) = %(prefix)s
  AND (%(scope)s::text IS NULL OR scope = %(scope)s)
  AND (%(user_id)s::text IS NULL OR user_id = %(user_id)s)
ORDER BY created_at DESC
LIMIT %(limit)s;

-- name: tenant_scopes
SELECT scope, count(*) AS memories, max(created_at) AS last_at
FROM onebox.memories
WHERE left(scope, length(%(prefix)s)) = %(prefix)s
GROUP BY scope ORDER BY scope;

-- name: last_event
SELECT seq, type, payload, created_at FROM onebox.agent_events
WHERE run_id = %(run_id)s ORDER BY seq DESC LIMIT 1;

-- name: step_warning_events
-- The warning events of one page of step attempts.
SELECT seq, type, execution_id, payload, created_at FROM onebox.agent_events
WHERE run_id = %(run_id)s AND execution_id = ANY(%(ids)s)
  AND type IN ('BLOCKED_EXTERNAL_ACCESS', 'step_lease_expired', 'workspace_restored')
ORDER BY seq;

-- name: run_waiting_approvals
SELECT step_id FROM onebox.task_execution
WHERE run_id = %(run_id)s AND status = 'PENDING' AND waiting_for = 'approval'
ORDER BY step_number;

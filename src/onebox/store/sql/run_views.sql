-- Reads of one tenant's runs as the API and the CLI show them: search, plans, steps' warnings.

-- name: run_tenant
SELECT tenant_id FROM onebox.runs WHERE id = %(run_id)s;

-- name: search_runs
SELECT r.id, r.name, r.status, r.source, r.tenant_id, r.trace_id, r.error, r.created_at,
       r.updated_at, r.started_at, r.finished_at, left(r.answer, 200) AS answer_preview,
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
       OR EXISTS (SELECT 1 FROM jsonb_path_query(r.request, 'strict $.**') v
                  WHERE jsonb_typeof(v) = 'string' AND v #>> '{}' ILIKE '%%' || %(text)s || '%%'))
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

-- name: step_execution
SELECT t.* FROM onebox.task_execution t
WHERE t.id = %(execution_id)s AND t.run_id = %(run_id)s;

-- name: last_event
SELECT seq, type, payload, created_at FROM onebox.agent_events
WHERE run_id = %(run_id)s ORDER BY seq DESC LIMIT 1;

-- name: step_warning_events
-- The warning events of one page of step attempts.
SELECT seq, type, execution_id, payload, created_at FROM onebox.agent_events
WHERE run_id = %(run_id)s AND execution_id = ANY(%(ids)s)
  AND type IN ('BLOCKED_EXTERNAL_ACCESS', 'step_lease_expired', 'workspace_restored',
               'workspace_merged')
ORDER BY seq;

-- name: run_waiting_approvals
SELECT step_id FROM onebox.task_execution
WHERE run_id = %(run_id)s AND status = 'PENDING' AND waiting_for = 'approval'
ORDER BY step_number;

-- name: run_session
SELECT id, request FROM onebox.runs WHERE id = %(run_id)s AND tenant_id = %(tenant_id)s;

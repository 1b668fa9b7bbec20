-- Runs, plans, step attempts and their events. Every state change goes with an event
-- in the same transaction (see onebox.store.runs).

-- name: insert_run
-- Nothing when the tenant already used the idempotency key (one namespace per tenant).
INSERT INTO onebox.runs (id, trace_id, status, source, request, request_hash, name,
                         idempotency_key, tenant_id, profile)
VALUES (%(id)s, %(trace_id)s, 'PENDING', %(source)s, %(request)s, %(request_hash)s, %(name)s,
        %(idempotency_key)s, %(tenant_id)s, %(profile)s)
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
RETURNING id;

-- name: run_by_idempotency_key
SELECT id, trace_id, source, request, request_hash, name FROM onebox.runs
WHERE tenant_id = %(tenant_id)s AND idempotency_key = %(key)s;

-- name: insert_plan
INSERT INTO onebox.plans (id, run_id, version, spec, spec_hash, reason)
VALUES (%(id)s, %(run_id)s, %(version)s, %(spec)s, %(spec_hash)s, %(reason)s);

-- name: set_current_plan
UPDATE onebox.runs SET current_plan_id = %(plan_id)s, steps_left = %(steps_left)s, updated_at = now()
WHERE id = %(run_id)s;

-- name: insert_event
INSERT INTO onebox.agent_events (run_id, session_id, trace_id, execution_id, type, payload)
VALUES (%(run_id)s, %(session_id)s, %(trace_id)s, %(execution_id)s, %(type)s, %(payload)s)
RETURNING seq;

-- name: insert_step
-- One attempt, its step_queued event, and a wake-up for idle workers: one round trip.
WITH ins AS (
    INSERT INTO onebox.task_execution
        (id, run_id, plan_id, session_id, trace_id, step_id, step_number, attempt, tool_name,
         input_hash, status, max_attempts, available_at, waiting_for, details, needs_model)
    VALUES (%(id)s, %(run_id)s, %(plan_id)s, %(session_id)s, %(trace_id)s, %(step_id)s,
            %(step_number)s, %(attempt)s, %(tool_name)s, %(input_hash)s, 'PENDING',
            %(max_attempts)s, now() + make_interval(secs => %(delay_s)s), %(waiting_for)s,
            %(details)s, %(needs_model)s)
    RETURNING id, run_id, session_id, trace_id
), ev AS (
    INSERT INTO onebox.agent_events (run_id, session_id, trace_id, execution_id, type, payload)
    SELECT run_id, session_id, trace_id, id, 'step_queued', %(payload)s FROM ins
)
SELECT pg_notify('onebox_steps', '') FROM ins;

-- name: insert_steps
-- First attempts of many steps, their step_queued events (in step order) and one wake-up:
-- one statement per batch (see onebox.runtime.submit). A step that already has its first
-- attempt (a batch written twice) is skipped, and so is a run that ended meanwhile (the
-- share lock orders the batch with a cancel: one or the other comes first, whole).
WITH live AS (
    SELECT id FROM onebox.runs
    WHERE id = %(run_id)s AND status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'DEAD')
    FOR SHARE
), rows AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(step_ids)s::text[], %(step_numbers)s::int[],
                         %(tool_names)s::text[], %(input_hashes)s::text[],
                         %(max_attempts)s::int[])
        AS r(id, step_id, step_number, tool_name, input_hash, max_attempts)
), ins AS (
    INSERT INTO onebox.task_execution
        (id, run_id, plan_id, session_id, trace_id, step_id, step_number, attempt, tool_name,
         input_hash, status, max_attempts, available_at, details)
    SELECT r.id, live.id, %(plan_id)s, %(session_id)s, %(trace_id)s, r.step_id, r.step_number,
           1, r.tool_name, r.input_hash, 'PENDING', r.max_attempts, now(), '{}'::jsonb
    FROM rows AS r, live ORDER BY r.step_number
    ON CONFLICT (run_id, step_id, attempt) DO NOTHING
    RETURNING id, run_id, plan_id, session_id, trace_id, step_id, step_number, tool_name,
              input_hash, max_attempts
), ev AS (
    INSERT INTO onebox.agent_events (run_id, session_id, trace_id, execution_id, type, payload)
    SELECT run_id, session_id, trace_id, id, 'step_queued',
           jsonb_build_object('execution_id', id::text, 'step_id', step_id,
                              'step_number', step_number, 'attempt', 1, 'tool', tool_name,
                              'input_hash', input_hash, 'delay_s', 0.0,
                              'plan_id', plan_id::text, 'max_attempts', max_attempts)
    FROM ins ORDER BY step_number
)
SELECT count(*) AS queued, pg_notify('onebox_steps', '') FROM ins;

-- name: claim_steps
-- Claim ready attempts as leases (fencing token + 1), start their runs, and write the
-- step_started / run_started events: one round trip. Lock order (onebox.runtime.queue):
-- each run row (KEY SHARE) before its attempts, both SKIP LOCKED, so a claim never waits
-- for a cancel, a recovery or another claim, and skips a run that is being cancelled.
-- Only starting a PENDING run waits, for another claim starting it, in run id order.
-- Model work (needs_model) goes only to a worker that serves that model (%(models)s).
WITH picked AS (
    SELECT t.id FROM onebox.runs r JOIN onebox.task_execution t ON t.run_id = r.id
    WHERE t.status = 'PENDING' AND t.waiting_for IS NULL AND t.available_at <= now()
      AND (%(run_id)s::uuid IS NULL OR t.run_id = %(run_id)s::uuid)
      AND (t.needs_model IS NULL OR t.needs_model = ANY(%(models)s::text[]))
    ORDER BY t.available_at, t.id
    LIMIT %(limit)s
    FOR KEY SHARE OF r SKIP LOCKED
    FOR UPDATE OF t SKIP LOCKED
), claimed AS (
    UPDATE onebox.task_execution t
    SET status = 'RUNNING', lease_owner = %(owner)s,
        lease_expires_at = now() + make_interval(secs => %(lease_s)s),
        fencing_token = t.fencing_token + 1, started_at = now(), updated_at = now()
    FROM picked WHERE t.id = picked.id
    RETURNING t.*
), starting AS (
    SELECT r.id FROM onebox.runs r
    WHERE r.id IN (SELECT run_id FROM claimed) AND r.status = 'PENDING'
    ORDER BY r.id
    FOR NO KEY UPDATE
), started AS (
    UPDATE onebox.runs r
    SET status = 'RUNNING', started_at = coalesce(r.started_at, now()), updated_at = now()
    FROM starting WHERE r.id = starting.id
    RETURNING r.id, r.trace_id
), run_events AS (
    INSERT INTO onebox.agent_events (run_id, trace_id, type, payload)
    SELECT id, trace_id, 'run_started', jsonb_build_object('worker', %(owner)s::text) FROM started
), step_events AS (
    INSERT INTO onebox.agent_events (run_id, session_id, trace_id, execution_id, type, payload)
    SELECT run_id, session_id, trace_id, id, 'step_started',
           jsonb_build_object('execution_id', id::text, 'step_id', step_id, 'attempt', attempt,
                              'worker', %(owner)s::text, 'fencing_token', fencing_token)
    FROM claimed ORDER BY id
)
SELECT * FROM claimed ORDER BY available_at, id;

-- name: renew_leases
UPDATE onebox.task_execution t
SET lease_expires_at = now() + make_interval(secs => %(lease_s)s)
FROM onebox.runs r
WHERE t.id = ANY(%(ids)s) AND t.lease_owner = %(owner)s AND t.status = 'RUNNING'
  AND r.id = t.run_id
RETURNING t.id, t.fencing_token, r.status AS run_status;

-- name: lock_run
SELECT * FROM onebox.runs WHERE id = %(run_id)s FOR UPDATE;

-- name: lock_run_for_archive
-- Lock the run row first (see onebox.runtime.archive) and count a success.
UPDATE onebox.runs SET steps_left = steps_left - %(succeeded)s::int
WHERE id = %(run_id)s
RETURNING *;

-- name: finish_step
-- Write the attempt's result only while the caller's fencing token is current, with its
-- event: one round trip. No row back means the lease was lost.
WITH done AS (
    UPDATE onebox.task_execution
    SET status = %(status)s, exit_code = %(exit_code)s, output_hash = %(output_hash)s,
        duration_ms = %(duration_ms)s, memory_used_mb = %(memory_used_mb)s,
        cpu_usage_percent = %(cpu_usage_percent)s, stdout = %(stdout)s, stderr = %(stderr)s,
        stdout_bytes = %(stdout_bytes)s, stderr_bytes = %(stderr_bytes)s,
        error = %(error)s, details = details || %(details)s, finished_at = now(),
        updated_at = now(), lease_owner = NULL, lease_expires_at = NULL
    WHERE id = %(id)s AND fencing_token = %(fencing_token)s AND status = 'RUNNING'
    RETURNING *
), ev AS (
    INSERT INTO onebox.agent_events (run_id, session_id, trace_id, execution_id, type, payload)
    SELECT run_id, session_id, trace_id, id, %(event_type)s,
           jsonb_build_object('execution_id', id::text, 'step_id', step_id, 'attempt', attempt,
                              'status', status, 'exit_code', exit_code,
                              'output_hash', output_hash, 'duration_ms', duration_ms,
                              'memory_used_mb', memory_used_mb,
                              'cpu_usage_percent', cpu_usage_percent, 'error', error)
    FROM done
)
SELECT * FROM done;

-- name: latest_attempts
SELECT DISTINCT ON (step_id) step_id, status, attempt, output_hash, id
FROM onebox.task_execution WHERE run_id = %(run_id)s
ORDER BY step_id, attempt DESC;

-- name: latest_attempts_of
SELECT DISTINCT ON (step_id) step_id, status, attempt, output_hash, id
FROM onebox.task_execution WHERE run_id = %(run_id)s AND step_id = ANY(%(step_ids)s)
ORDER BY step_id, attempt DESC;

-- name: plan_by_id
SELECT * FROM onebox.plans WHERE id = %(plan_id)s;

-- name: expired_leases
SELECT id, run_id FROM onebox.task_execution
WHERE status = 'RUNNING' AND lease_expires_at < now()
ORDER BY lease_expires_at
LIMIT %(limit)s;

-- name: expire_step
UPDATE onebox.task_execution
SET status = 'FAILED', error = %(error)s, finished_at = now(), updated_at = now(),
    lease_owner = NULL, lease_expires_at = NULL
WHERE id = %(id)s AND status = 'RUNNING' AND lease_expires_at < now()
RETURNING *;

-- name: lease_losses
SELECT count(*) AS n FROM onebox.task_execution
WHERE run_id = %(run_id)s AND step_id = %(step_id)s AND error = %(error)s;

-- name: release_leases
UPDATE onebox.task_execution SET lease_expires_at = now() - interval '1 second'
WHERE id = ANY(%(ids)s) AND lease_owner = %(owner)s AND status = 'RUNNING';

-- name: cancel_pending_steps
UPDATE onebox.task_execution
SET status = 'FAILED', error = %(error)s, finished_at = now(), updated_at = now()
WHERE run_id = %(run_id)s AND status = 'PENDING'
RETURNING id, step_id, attempt;

-- name: finish_run
UPDATE onebox.runs SET status = %(status)s, error = %(error)s, answer = %(answer)s,
       finished_at = now(), updated_at = now()
WHERE id = %(run_id)s AND status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'DEAD')
RETURNING *;

-- name: get_run
SELECT * FROM onebox.runs WHERE id = %(run_id)s;

-- name: list_runs
SELECT r.*,
       (SELECT count(DISTINCT step_id) FROM onebox.task_execution t WHERE t.run_id = r.id) AS steps_started,
       (SELECT count(*) FROM onebox.task_execution t
         WHERE t.run_id = r.id AND t.status = 'SUCCESS') AS steps_succeeded
FROM onebox.runs r
WHERE (%(status)s::text IS NULL OR r.status = %(status)s)
  AND (%(tenant_id)s::text IS NULL OR r.tenant_id = %(tenant_id)s)
  AND (NOT %(stale_only)s OR 'run_stale' = (
        SELECT e.type FROM onebox.agent_events e WHERE e.run_id = r.id ORDER BY e.seq DESC LIMIT 1))
ORDER BY r.created_at DESC
LIMIT %(limit)s;

-- name: run_steps
-- A run's attempts by step number, and in time order within a step: the model's code for a
-- step (write_code), its first try, the fix (fix_code), the next try... (the agent's model
-- calls for step N share its number and are each attempt 1, so attempt alone ties them).
SELECT * FROM onebox.task_execution WHERE run_id = %(run_id)s
ORDER BY step_number, created_at, attempt, id;

-- name: run_steps_page
-- One page of a run's attempts in the order of run_steps, after the cursor (step number,
-- place): ``place`` is the attempt's rank within its step number in that order (its attempt
-- number for a plan file's step), so "12.1" names one row even when model calls share it.
SELECT * FROM (
    SELECT *, row_number() OVER (PARTITION BY step_number
                                 ORDER BY created_at, attempt, id) AS place
    FROM onebox.task_execution
    WHERE run_id = %(run_id)s AND step_number >= %(after_number)s
) ranked
WHERE (step_number, place) > (%(after_number)s, %(after_attempt)s)
ORDER BY step_number, place
LIMIT %(limit)s;

-- name: run_step_counts
-- How many steps are in each state, by their latest attempt (a queued approval is WAITING),
-- and how many attempts there are in all: aggregates, no rows loaded.
WITH latest AS (
    SELECT DISTINCT ON (step_id) status, waiting_for FROM onebox.task_execution
    WHERE run_id = %(run_id)s ORDER BY step_id, attempt DESC
)
SELECT CASE WHEN status = 'PENDING' AND waiting_for = 'approval' THEN 'WAITING'
            ELSE status END AS status, count(*) AS steps
FROM latest GROUP BY 1 ORDER BY 1;

-- name: run_attempt_count
SELECT count(*) AS attempts FROM onebox.task_execution WHERE run_id = %(run_id)s;

-- name: run_overwrites
-- Paths two steps that do not depend on each other both changed (onebox.snapshots.history),
-- as the commits said them.
SELECT payload FROM onebox.agent_events
WHERE run_id = %(run_id)s AND type = 'workspace_merged'
ORDER BY seq
LIMIT 50;

-- name: run_failed_steps
-- Steps whose latest attempt failed, in plan order, with their error.
SELECT * FROM (
    SELECT DISTINCT ON (step_id) * FROM onebox.task_execution
    WHERE run_id = %(run_id)s ORDER BY step_id, attempt DESC) AS latest
WHERE status IN ('FAILED', 'TIMEOUT')
ORDER BY step_number
LIMIT %(limit)s;

-- name: run_events
SELECT * FROM onebox.agent_events WHERE run_id = %(run_id)s AND seq > %(after_seq)s ORDER BY seq;

-- name: upsert_session
-- The session belongs to its run's tenant (the sessions service checks it), and to the
-- latest run that used it (a thread's turns share one): finished_sessions releases it only
-- once that run has ended, not when the turn that first used it did.
INSERT INTO onebox.sessions (id, run_id, backend, tenant_id)
SELECT %(id)s, %(run_id)s, %(backend)s, r.tenant_id FROM onebox.runs r WHERE r.id = %(run_id)s
ON CONFLICT (id) DO UPDATE SET last_used_at = now(), status = 'ACTIVE', released_at = NULL,
    run_id = CASE WHEN onebox.sessions.tenant_id = EXCLUDED.tenant_id THEN EXCLUDED.run_id
                  ELSE onebox.sessions.run_id END;

-- name: release_session
UPDATE onebox.sessions SET status = 'RELEASED', released_at = now()
WHERE id = %(id)s AND status = 'ACTIVE'
RETURNING id;

-- name: owned_sessions
-- Live sessions a local process made for itself (`onebox exec`'s own): ended by it, or, if
-- it died first, reclaimed by the next process of its sandbox dir (engine.sessions).
SELECT id, owner FROM onebox.sessions
WHERE status = 'ACTIVE' AND owner IS NOT NULL
ORDER BY created_at LIMIT 1000;

-- name: released_of
SELECT id FROM onebox.sessions WHERE id = ANY(%(ids)s) AND status = 'RELEASED';

-- name: finished_sessions
SELECT s.id, s.run_id, r.trace_id FROM onebox.sessions s
JOIN onebox.runs r ON r.id = s.run_id
WHERE s.status = 'ACTIVE'
  AND r.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'DEAD')
  AND (%(run_id)s::uuid IS NULL OR s.run_id = %(run_id)s::uuid)
  AND NOT EXISTS (SELECT 1 FROM onebox.task_execution t
                  WHERE t.session_id = s.id AND t.status = 'RUNNING');

-- name: set_run_status
UPDATE onebox.runs SET status = %(status)s, updated_at = now()
WHERE id = %(run_id)s AND status = ANY(%(from_states)s)
RETURNING id;

-- name: waiting_approval
SELECT * FROM onebox.task_execution
WHERE run_id = %(run_id)s AND step_id = %(step_id)s AND status = 'PENDING'
  AND waiting_for = 'approval'
FOR UPDATE;

-- name: run_step_names
-- Every step id a run knows: those with an attempt, and those its current plan declares.
SELECT step_id FROM onebox.task_execution WHERE run_id = %(run_id)s
UNION
SELECT s.step->>'id' FROM onebox.runs r
JOIN onebox.plans p ON p.id = r.current_plan_id,
     jsonb_array_elements(p.spec->'steps') AS s(step)
WHERE r.id = %(run_id)s AND jsonb_typeof(p.spec->'steps') = 'array' AND s.step ? 'id';

-- name: decide_approval
UPDATE onebox.task_execution
SET status = %(status)s, exit_code = NULL, output_hash = %(output_hash)s, error = %(error)s,
    stdout = %(stdout)s, details = details || %(details)s, started_at = created_at,
    waiting_for = NULL,
    finished_at = now(), updated_at = now(),
    duration_ms = extract(epoch FROM now() - created_at) * 1000
WHERE id = %(id)s
RETURNING *;

-- name: open_approvals
SELECT count(*) AS n FROM onebox.task_execution
WHERE run_id = %(run_id)s AND status = 'PENDING' AND waiting_for = 'approval';

-- name: reopen_run
UPDATE onebox.runs SET status = 'PENDING', error = NULL, finished_at = NULL, updated_at = now()
WHERE id = %(run_id)s AND status = ANY(%(from_states)s)
RETURNING *;

-- name: wait_for_provider
-- The model provider failed: the run waits (with the reason) for the next attempt.
UPDATE onebox.runs SET status = 'WAITING', error = %(reason)s, updated_at = now()
WHERE id = %(run_id)s AND status IN ('PENDING', 'RUNNING', 'WAITING')
RETURNING id;

-- name: provider_back
-- A model call succeeded again: a run that waited only for the provider runs on.
UPDATE onebox.runs r SET status = 'RUNNING', error = NULL, updated_at = now()
WHERE r.id = %(run_id)s AND r.status = 'WAITING' AND NOT EXISTS (
    SELECT 1 FROM onebox.task_execution t
    WHERE t.run_id = r.id AND t.status = 'PENDING' AND t.waiting_for = 'approval')
RETURNING id;

-- name: silent_runs
SELECT r.id, r.trace_id, last.type AS last_type, last.created_at AS last_at
FROM onebox.runs r
CROSS JOIN LATERAL (
    SELECT e.type, e.created_at FROM onebox.agent_events e
    WHERE e.run_id = r.id ORDER BY e.seq DESC LIMIT 1) AS last
WHERE r.status IN ('PENDING', 'RUNNING', 'WAITING')
  AND last.created_at < now() - make_interval(secs => %(stale_after_s)s)
  AND last.type <> 'run_stale';

-- name: insert_schedule
INSERT INTO onebox.schedules (id, tenant_id, name, cron, plan, next_at)
VALUES (%(id)s, %(tenant_id)s, %(name)s, %(cron)s, %(plan)s, %(next_at)s)
ON CONFLICT (tenant_id, name) DO NOTHING
RETURNING *;

-- name: list_schedules
SELECT s.*, (SELECT max(slot) FROM onebox.schedule_fires f WHERE f.schedule_id = s.id) AS last_slot,
       (SELECT count(*) FROM onebox.schedule_fires f WHERE f.schedule_id = s.id) AS fired
FROM onebox.schedules s
WHERE (%(tenant_id)s::text IS NULL OR s.tenant_id = %(tenant_id)s)
ORDER BY s.name;

-- name: delete_schedule
DELETE FROM onebox.schedules WHERE name = %(name)s AND tenant_id = %(tenant_id)s RETURNING id;

-- name: due_schedules
SELECT * FROM onebox.schedules WHERE enabled AND next_at <= now()
ORDER BY next_at LIMIT %(limit)s;

-- name: claim_slot
INSERT INTO onebox.schedule_fires (schedule_id, slot) VALUES (%(schedule_id)s, %(slot)s)
ON CONFLICT DO NOTHING
RETURNING schedule_id;

-- name: link_slot
UPDATE onebox.schedule_fires SET run_id = %(run_id)s
WHERE schedule_id = %(schedule_id)s AND slot = %(slot)s;

-- name: advance_schedule
UPDATE onebox.schedules SET next_at = %(next_at)s
WHERE id = %(id)s AND next_at = %(slot)s;

-- name: agent_log
-- The agent's log from entry ``from_seq`` on (0: all of it); a worker's cached agent reads
-- from the last entry it consumed, which must still be there (else it was rolled back).
SELECT seq, type, payload FROM onebox.agent_events
WHERE run_id = %(run_id)s AND type IN ('agent_action', 'agent_observation')
  AND seq >= %(from_seq)s
ORDER BY seq;

-- name: plan_version_id
SELECT id FROM onebox.plans WHERE run_id = %(run_id)s AND version = %(version)s;

-- name: last_attempt_number
-- The step's latest attempt number (its next attempt is one more), without its output.
SELECT max(attempt) AS attempt FROM onebox.task_execution
WHERE run_id = %(run_id)s AND step_id = %(step_id)s HAVING max(attempt) IS NOT NULL;

-- name: step_attempts
SELECT * FROM onebox.task_execution WHERE run_id = %(run_id)s AND step_id = %(step_id)s
ORDER BY attempt;

-- name: recorded_model_reply
-- A model call an agent action already made (its worker died before archiving it).
SELECT response FROM onebox.llm_calls
WHERE run_id = %(run_id)s AND action_id = %(action_id)s AND response IS NOT NULL
ORDER BY id DESC LIMIT 1;

-- name: agent_plan_id
-- The plan version an agent action belongs to (the latest when it names none).
SELECT id, version FROM onebox.plans
WHERE run_id = %(run_id)s AND (%(version)s::int IS NULL OR version = %(version)s::int)
ORDER BY version DESC LIMIT 1;

-- name: run_plans
-- Every plan version of a run, oldest first (copied into a fork or a replay of it).
SELECT id, version, spec, spec_hash, reason FROM onebox.plans
WHERE run_id = %(run_id)s ORDER BY version;

-- Threads and their turns. See onebox.runtime.threads.

-- name: insert_thread
INSERT INTO onebox.threads (id, tenant_id, title, profile, session_id)
VALUES (%(id)s, %(tenant_id)s, %(title)s, %(profile)s, %(session_id)s)
RETURNING *;

-- name: get_thread
SELECT * FROM onebox.threads WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: lock_thread
SELECT * FROM onebox.threads WHERE id = %(id)s AND tenant_id = %(tenant_id)s FOR UPDATE;

-- name: list_threads
SELECT * FROM onebox.threads WHERE tenant_id = %(tenant_id)s
ORDER BY updated_at DESC, id LIMIT %(limit)s;

-- name: delete_thread
DELETE FROM onebox.threads WHERE id = %(id)s AND tenant_id = %(tenant_id)s RETURNING session_id;

-- name: next_turn
UPDATE onebox.threads SET turns = turns + 1, updated_at = now()
WHERE id = %(id)s RETURNING turns;

-- name: insert_turn
INSERT INTO onebox.thread_turns (thread_id, turn, run_id, message, context)
VALUES (%(thread_id)s, %(turn)s, %(run_id)s, %(message)s, %(context)s);

-- name: thread_turns
-- The thread's turns with their run's state and answer (newest last); upkeep_error says why
-- a turn's facts and summary were not taken (its upkeep failed past its attempts).
SELECT t.turn, t.run_id, t.message, t.context, t.facts, t.upkept_at, t.created_at,
       r.status, r.answer, r.error,
       (SELECT e.payload->>'error' FROM onebox.agent_events e
        WHERE e.run_id = t.run_id AND e.type = 'thread_upkeep_failed'
        ORDER BY e.seq DESC LIMIT 1) AS upkeep_error
FROM onebox.thread_turns t LEFT JOIN onebox.runs r ON r.id = t.run_id
WHERE t.thread_id = %(thread_id)s AND t.turn > %(after)s
ORDER BY t.turn LIMIT %(limit)s;

-- name: recent_turns
SELECT t.turn, t.run_id, t.message, r.answer, r.status FROM onebox.thread_turns t
LEFT JOIN onebox.runs r ON r.id = t.run_id
WHERE t.thread_id = %(thread_id)s ORDER BY t.turn DESC LIMIT %(limit)s;

-- name: turn_of_run
SELECT t.*, th.tenant_id FROM onebox.thread_turns t
JOIN onebox.threads th ON th.id = t.thread_id
WHERE t.run_id = %(run_id)s AND t.copied_from IS NULL;

-- name: set_turn_facts
-- The memories a turn's facts step remembered (written when that step is archived).
UPDATE onebox.thread_turns SET facts = %(facts)s
WHERE thread_id = %(thread_id)s AND turn = %(turn)s;

-- name: mark_turn_upkept
-- Once per turn: the summary step that marks it writes the summary.
UPDATE onebox.thread_turns SET upkept_at = now()
WHERE thread_id = %(thread_id)s AND turn = %(turn)s AND upkept_at IS NULL
RETURNING turn;

-- name: agent_finished_of
-- How the turn's agent finished (its answer), read when the turn's upkeep ends its run.
SELECT payload FROM onebox.agent_events
WHERE run_id = %(run_id)s AND type = 'agent_finished' ORDER BY seq DESC LIMIT 1;

-- name: turns_behind
-- Turns the summary and memory lack: their upkeep failed past its attempts.
SELECT t.turn FROM onebox.thread_turns t
WHERE t.thread_id = %(thread_id)s AND t.upkept_at IS NULL
  AND EXISTS (SELECT 1 FROM onebox.agent_events e
              WHERE e.run_id = t.run_id AND e.type = 'thread_upkeep_failed')
ORDER BY t.turn;

-- name: set_summary
-- Fenced on the version read: two upkeeps racing write one summary version each, in turn.
UPDATE onebox.threads SET summary = %(summary)s, summary_version = summary_version + 1,
       summarized_turns = %(summarized_turns)s, updated_at = now()
WHERE id = %(id)s AND summary_version = %(version)s
RETURNING summary_version;

-- name: thread_files
-- The files the thread's steps wrote (newest size of each path), from the archived steps.
SELECT DISTINCT ON (f->>'path') f->>'path' AS path, (f->>'size')::bigint AS size
FROM onebox.thread_turns t
JOIN onebox.task_execution e ON e.run_id = t.run_id AND e.status = 'SUCCESS'
CROSS JOIN LATERAL jsonb_array_elements(COALESCE(e.details->'files_written', '[]'::jsonb)) f
WHERE t.thread_id = %(thread_id)s AND f->>'path' NOT LIKE '.onebox/%%'
ORDER BY f->>'path', e.finished_at DESC
LIMIT %(limit)s;

-- name: thread_memories
SELECT id FROM onebox.memories WHERE scope = %(scope)s
UNION ALL SELECT id FROM onebox.memories_archive WHERE scope = %(scope)s;

-- name: memories_by_ids
-- What a turn's context recalled, as it was (a memory superseded or archived since is shown too).
SELECT id, content, valid_from, metadata FROM onebox.memories WHERE id = ANY(%(ids)s::uuid[])
UNION ALL
SELECT id, content, valid_from, metadata FROM onebox.memories_archive
WHERE id = ANY(%(ids)s::uuid[]);

-- name: turn_episodes
-- The episodes of some turns of a thread's scope (the turns next to those a turn recalled).
SELECT id, content, valid_from, metadata FROM onebox.memories
WHERE scope = %(scope)s AND metadata @> '{"episode": true}'::jsonb
  AND (metadata->>'turn')::int = ANY(%(turns)s::int[])
  AND superseded_by IS NULL AND invalid_at IS NULL;

-- name: fork_turns
-- A fork's turns before the fork point: the parent's rows (their runs, messages, contexts).
INSERT INTO onebox.thread_turns (thread_id, turn, run_id, message, context, facts,
                                 upkept_at, created_at, copied_from)
SELECT %(to)s, turn, run_id, message, context, facts, upkept_at, created_at, thread_id
FROM onebox.thread_turns WHERE thread_id = %(from)s AND turn < %(turn)s;

-- name: set_fork_state
-- The fork's summary as it was after its last copied turn, its turn count and its origin.
UPDATE onebox.threads SET summary = %(summary)s, summary_version = %(summary_version)s,
       summarized_turns = %(summarized_turns)s, turns = %(turns)s, forked_from = %(origin)s
WHERE id = %(id)s RETURNING *;

-- name: summary_after
-- The summary a turn's upkeep wrote (its newest successful summary step), for turns up to
-- ``turn``, newest first.
SELECT t.turn, e.details ->> 'summary' AS summary FROM onebox.thread_turns t
JOIN onebox.task_execution e ON e.run_id = t.run_id AND e.step_id = 'upkeep:summary'
     AND e.status = 'SUCCESS'
WHERE t.thread_id = %(thread_id)s AND t.turn <= %(turn)s AND e.details ? 'summary'
ORDER BY t.turn DESC, e.attempt DESC LIMIT 1;

-- name: copy_memories
-- The thread's memories from before turn ``turn`` (a fact or episode of an earlier turn, or
-- a memory without a turn stored before ``before``) into the fork's scope, under new ids.
-- A memory superseded by one that is not copied (a later turn's) is current again.
WITH src AS (
    SELECT * FROM onebox.memories m WHERE m.scope = %(from_scope)s
      AND CASE WHEN jsonb_typeof(m.metadata -> 'turn') = 'number'
               THEN (m.metadata ->> 'turn')::numeric < %(turn)s
               ELSE m.created_at < %(before)s END
), ids AS (SELECT id, gen_random_uuid() AS new_id FROM src)
INSERT INTO onebox.memories (id, scope, user_id, kind, content, content_hash, summary,
        entities, metadata, embedding, tsv, fts_len, execution_id, valid_from, invalid_at,
        superseded_by, access_count, created_at, happened_at, happened_precision,
        happened_text)
SELECT i.new_id, %(to_scope)s, s.user_id, s.kind, s.content, s.content_hash, s.summary,
       s.entities, s.metadata, s.embedding, s.tsv, s.fts_len, s.execution_id, s.valid_from,
       CASE WHEN s.superseded_by IS NOT NULL AND sup.new_id IS NULL THEN NULL
            ELSE s.invalid_at END,
       sup.new_id, 0, s.created_at, s.happened_at, s.happened_precision, s.happened_text
FROM src s JOIN ids i ON i.id = s.id LEFT JOIN ids sup ON sup.id = s.superseded_by
RETURNING id;

-- name: head_before
-- The thread session's head as it was at ``before`` (what the turns before it committed).
SELECT id FROM onebox.snapshots
WHERE session_id = %(session_id)s AND committed_at IS NOT NULL AND committed_at <= %(before)s
  AND status = 'READY'
ORDER BY committed_at DESC LIMIT 1;

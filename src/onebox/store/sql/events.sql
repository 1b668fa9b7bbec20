-- The event log as live streams read it: the safe horizon, and events between two seqs.

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

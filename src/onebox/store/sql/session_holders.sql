-- The API servers of one database and the sessions each holds (see migration 0032).

-- name: register_server
INSERT INTO onebox.api_servers (id, url, host, process)
VALUES (%(id)s, %(url)s, %(host)s, %(process)s)
ON CONFLICT (id) DO UPDATE SET url = EXCLUDED.url, host = EXCLUDED.host,
                               process = EXCLUDED.process, seen_at = now()
RETURNING id;

-- name: heartbeat
UPDATE onebox.api_servers SET seen_at = now() WHERE id = %(id)s RETURNING id;

-- name: leave
DELETE FROM onebox.api_servers WHERE id = %(id)s RETURNING id;

-- name: holder_of
-- The session's holder, its address and whether it heartbeats within the lease.
SELECT s.id, s.status, s.holder, s.holder_epoch, a.url, a.process,
       (a.id IS NOT NULL AND a.seen_at >= now() - make_interval(secs => %(lease_s)s)) AS alive,
       extract(epoch FROM now() - a.seen_at) AS silent_s
FROM onebox.sessions s
LEFT JOIN onebox.api_servers a ON a.id = s.holder
WHERE s.id = %(id)s;

-- name: take_over
-- Compare-and-set: the session moves to %(me)s only if nobody moved it since it was read.
UPDATE onebox.sessions SET holder = %(me)s, holder_epoch = holder_epoch + 1
WHERE id = %(id)s AND status = 'ACTIVE' AND holder IS NOT DISTINCT FROM %(old)s
  AND holder_epoch = %(epoch)s
RETURNING holder_epoch;

-- name: newest_snapshot
SELECT id, sha256, created_at FROM onebox.snapshots
WHERE session_id = %(id)s AND status = 'READY'
ORDER BY created_at DESC LIMIT 1;

-- name: not_mine
-- Of these local session ids, the ones this server must drop: released, or held elsewhere.
SELECT id FROM onebox.sessions
WHERE id = ANY(%(ids)s) AND holder IS NOT NULL
  AND (status <> 'ACTIVE' OR holder <> %(me)s);

-- name: held_here
SELECT id FROM onebox.sessions WHERE holder = %(me)s AND status = 'ACTIVE';

-- name: changed_since_snapshot
-- Sessions held here used since their newest snapshot (or never snapshotted and used).
SELECT s.id FROM onebox.sessions s
WHERE s.holder = %(me)s AND s.status = 'ACTIVE'
  AND s.last_used_at > coalesce((SELECT max(n.created_at) FROM onebox.snapshots n
                                 WHERE n.session_id = s.id AND n.status = 'READY'),
                                '-infinity'::timestamptz);

-- name: make_cluster_secret
INSERT INTO onebox.cluster_secret (id, secret) VALUES (1, %(secret)s) ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: cluster_secret
SELECT secret FROM onebox.cluster_secret WHERE id = 1;

-- A session a local process made for itself and ends when its call does (`onebox exec`
-- without a server, without --keep) names that process: its sandbox owner
-- (host:sandbox dir:owner token, see sandbox/sweep.py). When the process dies before ending
-- it (kill -9), the next process on that sandbox dir that sweeps finds the owner gone and
-- reclaims the session: workspace, disk image and uid freed, the row released.
ALTER TABLE onebox.sessions ADD COLUMN owner text;

CREATE INDEX sessions_owner ON onebox.sessions (owner)
    WHERE status = 'ACTIVE' AND owner IS NOT NULL;

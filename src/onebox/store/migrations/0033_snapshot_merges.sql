-- A run session's head: the snapshot holding everything its steps committed so far.
--
-- committed_at is set when a step's snapshot becomes the head (under a per-session lock):
-- its own 'post' when the host's copy held the previous head, else a 'merge' snapshot, the
-- previous head plus that step's own changes ('pre' to 'post'), made from manifests alone
-- (docs/runtime.md, "Many hosts"). The head is the row with the newest committed_at. A
-- 'post' whose commit is not done yet, or was merged, is never the head.
ALTER TABLE onebox.snapshots DROP CONSTRAINT snapshots_kind_check;
ALTER TABLE onebox.snapshots ADD CONSTRAINT snapshots_kind_check
    CHECK (kind IN ('pre', 'post', 'manual', 'merge'));
ALTER TABLE onebox.snapshots ADD COLUMN committed_at timestamptz;
-- before merges, every finished snapshot but a 'pre' was the newest state in its turn
UPDATE onebox.snapshots SET committed_at = created_at
WHERE status = 'READY' AND kind <> 'pre';
CREATE INDEX snapshots_head_idx ON onebox.snapshots (session_id, committed_at DESC)
    WHERE committed_at IS NOT NULL;

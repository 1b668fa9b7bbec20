-- A thread forked at turn N (onebox thread fork): its turns before N are the parent's, the
-- same runs, so a run is the turn of its own thread and, copied, of each fork's.
-- copied_from names the thread a copied turn was taken from; a run's own turn is the one
-- with copied_from NULL (what a turn's upkeep looks up). forked_from on the thread says
-- where it came from: {"thread_id": ..., "turn": N}.
ALTER TABLE onebox.thread_turns DROP CONSTRAINT thread_turns_run_id_key;
ALTER TABLE onebox.thread_turns ADD COLUMN copied_from uuid;
CREATE UNIQUE INDEX thread_turns_own_run ON onebox.thread_turns (run_id)
    WHERE copied_from IS NULL;
CREATE INDEX thread_turns_run ON onebox.thread_turns (run_id);
ALTER TABLE onebox.threads ADD COLUMN forked_from jsonb;

-- onebox 0013: retention (issue 12). What happens to each table that references a run when
-- retention removes it:
--   plans, task_execution, agent_events, llm_calls: ON DELETE CASCADE (0001, 0005), right
--     as they are: they are the run.
--   sessions: retention deletes a removed run's sessions itself (never an ACTIVE one); the
--     foreign key stays SET NULL so that a run deleted by hand leaves an ACTIVE session's
--     row, hence its workspace, findable by the reaper.
--   snapshots (through their session or execution): deleted by retention, unless another
--     run's attempt still links to them; their objects go when no snapshot references them.
--   schedule_fires: SET NULL, kept: the row is what makes a cron slot fire exactly once.
--   kb_documents, memories (execution_id): SET NULL, kept: knowledge outlives its run.
-- These indexes make those deletes and the SET NULL actions index lookups, not scans.

-- retention by age: terminal runs by when they ended.
CREATE INDEX runs_terminal_ended_idx ON onebox.runs ((coalesce(finished_at, updated_at)))
    WHERE status IN ('SUCCEEDED', 'FAILED', 'DEAD', 'CANCELLED');
-- a removed run's sessions (0012 indexes only the ACTIVE ones).
CREATE INDEX sessions_run_idx ON onebox.sessions (run_id);
-- ON DELETE SET NULL of schedule_fires.run_id, kb_documents/memories.execution_id.
CREATE INDEX schedule_fires_run_idx ON onebox.schedule_fires (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX kb_documents_execution_idx ON onebox.kb_documents (execution_id)
    WHERE execution_id IS NOT NULL;
CREATE INDEX memories_execution_idx ON onebox.memories (execution_id)
    WHERE execution_id IS NOT NULL;

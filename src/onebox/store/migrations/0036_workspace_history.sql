-- A run's files as one history (docs/runtime.md, "A run's files").
--
-- One row per archived step attempt: what it did to the workspace, from the view it started
-- on (its 'pre') to what it left (its 'post'), as {path: entry, or null for a removal}.
-- Written in the transaction that archives the attempt, after its fenced write: an attempt
-- whose lease was taken over has none. A step's view is the run's base plus the change sets
-- of the steps it depends on, in plan order; the head is the base plus every step's.
CREATE TABLE onebox.workspace_changes (
    execution_id uuid        PRIMARY KEY REFERENCES onebox.task_execution(id) ON DELETE CASCADE,
    run_id       uuid        NOT NULL REFERENCES onebox.runs(id) ON DELETE CASCADE,
    session_id   text        NOT NULL,
    step_id      text        NOT NULL,
    position     integer     NOT NULL,
    changes      jsonb       NOT NULL,
    paths        integer     NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX workspace_changes_run_idx ON onebox.workspace_changes (run_id);

-- A kept output that is a sparse file is stored as its snapshot entry is: the blob holds its
-- data runs only (``data_sha256``), ``extents`` says where they go; holes read as zeros.
ALTER TABLE onebox.run_files ADD COLUMN extents jsonb, ADD COLUMN data_sha256 text;

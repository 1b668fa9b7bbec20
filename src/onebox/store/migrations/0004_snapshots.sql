-- onebox 0004: workspace snapshots. The bytes live in the object store (a manifest
-- plus content-addressed blobs); these rows say which snapshot exists, which step
-- it belongs to, and which objects it references, so garbage collection can tell
-- live objects from dead ones. A snapshot is PENDING while its objects upload.
CREATE TABLE onebox.snapshots (
    id            uuid PRIMARY KEY,
    session_id    text        NOT NULL,
    execution_id  uuid REFERENCES onebox.task_execution(id) ON DELETE SET NULL,
    kind          text        NOT NULL CHECK (kind IN ('pre','post','manual')),
    status        text        NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING','READY')),
    sha256        char(64)    NOT NULL,
    manifest_key  text        NOT NULL,
    bytes         bigint      NOT NULL CHECK (bytes >= 0),
    stored_bytes  bigint      NOT NULL DEFAULT 0 CHECK (stored_bytes >= 0),
    file_count    int         NOT NULL CHECK (file_count >= 0),
    object_count  int         NOT NULL CHECK (object_count >= 1),
    duration_ms   double precision,
    created_at    timestamptz NOT NULL DEFAULT now(),
    ready_at      timestamptz
);
CREATE INDEX snapshots_session_idx ON onebox.snapshots (session_id, created_at DESC);
CREATE INDEX snapshots_execution_idx ON onebox.snapshots (execution_id);

-- Every object (blobs and the manifest) each snapshot needs; the GC keeps exactly these.
CREATE TABLE onebox.snapshot_objects (
    snapshot_id uuid NOT NULL REFERENCES onebox.snapshots(id) ON DELETE CASCADE,
    key         text NOT NULL,
    PRIMARY KEY (snapshot_id, key)
);
CREATE INDEX snapshot_objects_key_idx ON onebox.snapshot_objects (key);

-- The workspace after the step (snapshot_id) and before it (pre_snapshot_id, for replay).
ALTER TABLE onebox.task_execution
    ADD COLUMN snapshot_id     uuid REFERENCES onebox.snapshots(id) ON DELETE SET NULL,
    ADD COLUMN pre_snapshot_id uuid REFERENCES onebox.snapshots(id) ON DELETE SET NULL;

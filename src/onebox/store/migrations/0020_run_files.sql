-- A run's files: the inputs placed in its workspace before its first step, and the
-- outputs (deliverables) kept in the object store when it ends. Bytes live in the object
-- store as content-addressed blobs (blobs/ab/<sha256>); a row names one.
CREATE TABLE onebox.run_files (
    run_id        uuid        NOT NULL REFERENCES onebox.runs (id) ON DELETE CASCADE,
    kind          text        NOT NULL CHECK (kind IN ('input', 'output')),
    path          text        NOT NULL,
    sha256        text        NOT NULL,
    size_bytes    bigint      NOT NULL,
    step_id       text,
    execution_id  uuid,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, kind, path)
);
CREATE INDEX run_files_sha256 ON onebox.run_files (sha256);

-- Files uploaded through the API before the run that names them (POST /v1/uploads).
CREATE TABLE onebox.uploads (
    id            uuid        PRIMARY KEY,
    tenant_id     text        NOT NULL,
    path          text        NOT NULL,
    sha256        text        NOT NULL,
    size_bytes    bigint      NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX uploads_sha256 ON onebox.uploads (sha256);

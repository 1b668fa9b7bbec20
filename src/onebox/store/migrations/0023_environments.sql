-- Environments (issue 15): named, versioned package layers built with pip inside a sandbox
-- (onebox.runtime.environments). Each (tenant, name) has versions 1, 2, ...; a READY row
-- names its layer by the sha256 of its content (a read-only directory <sandbox dir>/envs/<sha256>).
-- spec_sha256 hashes the normalized package list and python version: the same list reuses
-- a READY layer instead of building again.
CREATE TABLE onebox.environments (
    tenant_id      text        NOT NULL DEFAULT 'default',
    name           text        NOT NULL,
    version        integer     NOT NULL CHECK (version >= 1),
    packages       jsonb       NOT NULL,
    python_version text        NOT NULL,
    spec_sha256    text        NOT NULL,
    status         text        NOT NULL CHECK (status IN ('BUILDING', 'READY', 'FAILED')),
    sha256         text,
    size_bytes     bigint,
    file_count     integer,
    build_ms       double precision,
    log_tail       text        NOT NULL DEFAULT '',
    error          text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    PRIMARY KEY (tenant_id, name, version)
);
CREATE INDEX environments_spec ON onebox.environments (spec_sha256) WHERE status = 'READY';
CREATE INDEX environments_layer ON onebox.environments (sha256);

-- The environment a hand-made session runs with (name and version; NULL: none).
ALTER TABLE onebox.sessions ADD COLUMN environment text;
ALTER TABLE onebox.sessions ADD COLUMN environment_version integer;

-- onebox 0007: API keys. Only the sha256 of a key is stored; the key itself is shown once.
CREATE TABLE onebox.api_keys (
    id           uuid PRIMARY KEY,
    tenant_id    text        NOT NULL CHECK (tenant_id ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'),
    name         text        NOT NULL,
    key_hash     char(64)    NOT NULL UNIQUE,
    prefix       text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_keys_tenant_idx ON onebox.api_keys (tenant_id, created_at);

-- Secrets the API servers of one database share. 'sandbox_token' signs each sandbox's
-- access token (E2B's envdAccessToken): HMAC-SHA256 over the session's id, tenant and
-- creation time, so every server accepts a token any of them handed out, a token reaches
-- one live session only, and the tenant's API key is never given to a sandbox's users.
CREATE TABLE onebox.server_secrets (
    name       text PRIMARY KEY,
    secret     bytea       NOT NULL CHECK (length(secret) >= 32),
    created_at timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON onebox.server_secrets FROM PUBLIC;

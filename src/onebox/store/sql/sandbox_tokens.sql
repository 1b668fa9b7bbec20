-- Sandbox access tokens: the shared signing secret and the live session a token names.

-- name: insert_secret
INSERT INTO onebox.server_secrets (name, secret) VALUES (%(name)s, %(secret)s)
ON CONFLICT (name) DO NOTHING;

-- name: secret
SELECT secret FROM onebox.server_secrets WHERE name = %(name)s;

-- name: live_session
SELECT id, tenant_id, created_at FROM onebox.sessions WHERE id = %(id)s AND status = 'ACTIVE';

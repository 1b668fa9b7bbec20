-- API keys: only a key's sha256 is stored; each key belongs to one tenant.

-- name: insert_key
INSERT INTO onebox.api_keys (id, tenant_id, name, key_hash, prefix)
VALUES (%(id)s, %(tenant_id)s, %(name)s, %(key_hash)s, %(prefix)s)
RETURNING id, tenant_id, name, prefix, created_at, last_used_at, revoked_at;

-- name: list_keys
SELECT id, tenant_id, name, prefix, created_at, last_used_at, revoked_at
FROM onebox.api_keys
WHERE (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
ORDER BY created_at;

-- name: revoke_key
UPDATE onebox.api_keys SET revoked_at = now()
WHERE (id::text = %(ref)s OR prefix = %(ref)s) AND revoked_at IS NULL
RETURNING id, tenant_id, name, prefix, created_at, last_used_at, revoked_at;

-- name: authenticate
WITH k AS (
    SELECT id, tenant_id, name, prefix, last_used_at FROM onebox.api_keys
    WHERE key_hash = %(key_hash)s AND revoked_at IS NULL
), touched AS (
    UPDATE onebox.api_keys a SET last_used_at = now()
    FROM k WHERE a.id = k.id
      AND (k.last_used_at IS NULL OR k.last_used_at < now() - interval '30 seconds')
    RETURNING a.id
)
SELECT k.id, k.tenant_id, k.name, k.prefix FROM k;

-- name: count_keys
SELECT count(*) AS n FROM onebox.api_keys WHERE revoked_at IS NULL;

-- name: key_active
SELECT EXISTS (SELECT 1 FROM onebox.api_keys WHERE id = %(id)s AND revoked_at IS NULL) AS active;

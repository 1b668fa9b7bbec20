-- Agent profiles. See onebox.runtime.profiles.

-- name: upsert_profile
INSERT INTO onebox.profiles (tenant_id, name, spec) VALUES (%(tenant_id)s, %(name)s, %(spec)s)
ON CONFLICT (tenant_id, name) DO UPDATE SET spec = EXCLUDED.spec, updated_at = now()
RETURNING name, spec, created_at, updated_at;

-- name: get_profile
SELECT name, spec, created_at, updated_at FROM onebox.profiles
WHERE tenant_id = %(tenant_id)s AND name = %(name)s;

-- name: list_profiles
SELECT name, spec, created_at, updated_at FROM onebox.profiles
WHERE tenant_id = %(tenant_id)s ORDER BY name;

-- name: all_profile_specs
SELECT spec FROM onebox.profiles;

-- name: kept_without_provider
-- Queued model calls of runs kept before providers existed (a profile with its own endpoint
-- and no provider): the worker resolves each against its declarations (pending rows only,
-- through task_execution_queue_idx).
SELECT DISTINCT t.needs_model, r.profile
FROM onebox.task_execution t JOIN onebox.runs r ON r.id = t.run_id
WHERE t.status = 'PENDING' AND t.waiting_for IS NULL AND t.available_at <= now()
  AND t.needs_model IS NOT NULL AND r.profile->>'provider' IS NULL
LIMIT 1000;

-- name: delete_profile
DELETE FROM onebox.profiles WHERE tenant_id = %(tenant_id)s AND name = %(name)s RETURNING name;

-- Operator-declared model providers (no tenant: see onebox.runtime.providers).

-- name: upsert_provider
INSERT INTO onebox.providers (name, spec) VALUES (%(name)s, %(spec)s)
ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec, updated_at = now()
RETURNING name, spec;

-- name: list_providers
SELECT name, spec FROM onebox.providers ORDER BY name;

-- name: delete_provider
DELETE FROM onebox.providers WHERE name = %(name)s RETURNING name;

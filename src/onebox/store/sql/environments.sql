-- Environments: package layers per tenant. See onebox.runtime.environments.

-- name: start_build
INSERT INTO onebox.environments (tenant_id, name, version, packages, python_version,
                                 spec_sha256, status)
SELECT %(tenant_id)s, %(name)s, coalesce(max(version), 0) + 1, %(packages)s,
       %(python_version)s, %(spec_sha256)s, 'BUILDING'
FROM onebox.environments WHERE tenant_id = %(tenant_id)s AND name = %(name)s
RETURNING *;

-- name: finish_build
UPDATE onebox.environments
SET status = %(status)s, sha256 = %(sha256)s, size_bytes = %(size_bytes)s,
    file_count = %(file_count)s, build_ms = %(build_ms)s, log_tail = %(log_tail)s,
    error = %(error)s, finished_at = now()
WHERE tenant_id = %(tenant_id)s AND name = %(name)s AND version = %(version)s
RETURNING *;

-- name: ready_with_spec
SELECT * FROM onebox.environments
WHERE spec_sha256 = %(spec_sha256)s AND status = 'READY'
ORDER BY (tenant_id = %(tenant_id)s AND name = %(name)s) DESC, finished_at DESC
LIMIT 1;

-- name: latest_of_name
SELECT * FROM onebox.environments
WHERE tenant_id = %(tenant_id)s AND name = %(name)s
ORDER BY version DESC LIMIT 1;

-- name: latest_ready
SELECT * FROM onebox.environments
WHERE tenant_id = %(tenant_id)s AND name = %(name)s AND status = 'READY'
ORDER BY version DESC LIMIT 1;

-- name: one_version
SELECT * FROM onebox.environments
WHERE tenant_id = %(tenant_id)s AND name = %(name)s AND version = %(version)s;

-- name: list_environments
SELECT DISTINCT ON (name) * FROM onebox.environments
WHERE tenant_id = %(tenant_id)s
ORDER BY name, version DESC;

-- name: versions_of
SELECT * FROM onebox.environments
WHERE tenant_id = %(tenant_id)s AND name = %(name)s ORDER BY version;

-- name: delete_environment
DELETE FROM onebox.environments WHERE tenant_id = %(tenant_id)s AND name = %(name)s
RETURNING sha256;

-- name: layer_in_use
SELECT 1 FROM onebox.environments WHERE sha256 = %(sha256)s LIMIT 1;

-- name: profiles_using
SELECT name FROM onebox.profiles
WHERE tenant_id = %(tenant_id)s AND spec->>'environment' = %(name)s ORDER BY name;

-- name: set_session_environment
UPDATE onebox.sessions SET environment = %(name)s, environment_version = %(version)s
WHERE id = %(id)s RETURNING id;

-- name: session_environment
SELECT tenant_id, environment, environment_version FROM onebox.sessions WHERE id = %(id)s;

-- name: run_tenant
SELECT tenant_id FROM onebox.runs WHERE id = %(run_id)s;

-- name: run_environment
SELECT tenant_id, profile->>'environment' AS environment FROM onebox.runs WHERE id = %(run_id)s;

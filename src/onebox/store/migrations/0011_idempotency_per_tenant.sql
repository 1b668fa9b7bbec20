-- onebox 0011: one idempotency namespace per tenant, whichever door a run came through, and the
-- hash of the request each key was used for (a key reused with another request is refused).
-- The API stored keys as '<tenant>:<key>' and the CLI bare; keys become bare, unique per tenant.
-- Where a bare key and a prefixed one already named two runs, the prefixed one stays as it is.
ALTER TABLE onebox.runs ADD COLUMN request_hash text;
ALTER TABLE onebox.runs DROP CONSTRAINT runs_idempotency_key_key;
UPDATE onebox.runs r SET idempotency_key = substr(r.idempotency_key, length(r.tenant_id) + 2)
WHERE left(r.idempotency_key, length(r.tenant_id) + 1) = r.tenant_id || ':'
  AND NOT EXISTS (
    SELECT 1 FROM onebox.runs o
    WHERE o.tenant_id = r.tenant_id
      AND o.idempotency_key = substr(r.idempotency_key, length(r.tenant_id) + 2));
CREATE UNIQUE INDEX runs_tenant_idempotency_key_idx ON onebox.runs (tenant_id, idempotency_key);

-- A run's session belongs to its run's tenant. Sessions the worker opened were all
-- recorded as tenant 'default', so the sessions service (onebox exec, MCP, E2B) let
-- tenant default reach another tenant's live run workspace.
UPDATE onebox.sessions s SET tenant_id = r.tenant_id
FROM onebox.runs r WHERE s.run_id = r.id AND s.tenant_id <> r.tenant_id;

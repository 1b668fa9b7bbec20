-- Which process an API server is, as its kernel names it: boot id, pid namespace, pid and
-- start time (onebox.processes.process_key). A server that finds a session's holder on its
-- own kernel and pid namespace judges at once whether that process still runs; a pid alone
-- (another container's with the same host name, or a reused one) said so wrongly.
-- NULL: the holder's kernel could not say; its heartbeat alone decides.
ALTER TABLE onebox.api_servers ADD COLUMN process text;

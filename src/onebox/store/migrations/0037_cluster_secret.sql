-- The credential API servers of one database sign forwarded session requests with
-- (onebox.api.session_routing). Only a process that reads this database holds it; nothing a
-- caller sends does. Made by the first server that joins.
CREATE TABLE onebox.cluster_secret (
    id         integer     PRIMARY KEY CHECK (id = 1),
    secret     bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

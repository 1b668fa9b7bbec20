-- onebox 0022: one stored name per (tenant, name) for knowledge collections, memory scopes and
-- cached-answer scopes: '<tenant>/<name>' for every tenant (onebox.knowledge.collections.
-- tenant_name). The CLI used to store the default tenant's names bare ('docs') while the API
-- stored 'default/docs'; runs read both, the console only the prefixed ones. A bare name (no
-- '/', which a tenant id never holds) was the CLI's, so it becomes 'default/<name>'.
-- A bare collection whose prefixed twin exists is merged into it; where both hold one source,
-- the newer document stays. BM25 statistics of the moved spaces are recounted from the rows.
-- Idempotent: after it no bare name is left, and running it again changes nothing.

INSERT INTO onebox.kb_collections (name, embedding_model, embedding_dim, created_at, updated_at)
SELECT 'default/' || name, embedding_model, embedding_dim, created_at, updated_at
FROM onebox.kb_collections WHERE position('/' IN name) = 0
ON CONFLICT (name) DO NOTHING;

DELETE FROM onebox.kb_documents d USING onebox.kb_documents o
WHERE position('/' IN d.collection) = 0 AND o.collection = 'default/' || d.collection
  AND o.source = d.source AND o.updated_at >= d.updated_at;
DELETE FROM onebox.kb_documents d USING onebox.kb_documents o
WHERE d.collection LIKE 'default/%' AND position('/' IN o.collection) = 0
  AND d.collection = 'default/' || o.collection AND o.source = d.source;

UPDATE onebox.kb_documents SET collection = 'default/' || collection
WHERE position('/' IN collection) = 0;
UPDATE onebox.kb_chunks SET collection = 'default/' || collection
WHERE position('/' IN collection) = 0;
DELETE FROM onebox.kb_collections WHERE position('/' IN name) = 0;

UPDATE onebox.memories SET scope = 'default/' || scope WHERE position('/' IN scope) = 0;
UPDATE onebox.memories_archive SET scope = 'default/' || scope WHERE position('/' IN scope) = 0;
UPDATE onebox.answer_cache SET scope = 'default/' || scope WHERE position('/' IN scope) = 0;

-- BM25 statistics: drop the bare spaces and recount every space of tenant 'default'.
DELETE FROM onebox.fts_terms
WHERE space ~ '^(kb|mem):[^/]*$' OR space LIKE 'kb:default/%' OR space LIKE 'mem:default/%';
DELETE FROM onebox.fts_spaces
WHERE space ~ '^(kb|mem):[^/]*$' OR space LIKE 'kb:default/%' OR space LIKE 'mem:default/%';

INSERT INTO onebox.fts_terms (space, lexeme, df)
SELECT 'kb:' || c.collection, lx, count(*)
FROM onebox.kb_chunks c, unnest(tsvector_to_array(c.tsv)) AS lx
WHERE c.collection LIKE 'default/%' GROUP BY 1, 2;
INSERT INTO onebox.fts_spaces (space, n_rows, total_len)
SELECT 'kb:' || collection, count(*), coalesce(sum(fts_len), 0)
FROM onebox.kb_chunks WHERE collection LIKE 'default/%' GROUP BY 1;

INSERT INTO onebox.fts_terms (space, lexeme, df)
SELECT 'mem:' || m.scope, lx, count(*)
FROM onebox.memories m, unnest(tsvector_to_array(m.tsv)) AS lx
WHERE m.scope LIKE 'default/%' GROUP BY 1, 2;
INSERT INTO onebox.fts_spaces (space, n_rows, total_len)
SELECT 'mem:' || scope, count(*), coalesce(sum(fts_len), 0)
FROM onebox.memories WHERE scope LIKE 'default/%' GROUP BY 1;

-- One tenant's knowledge collections, documents and memories (names carry the tenant prefix).

-- name: tenant_collections
SELECT k.name, k.embedding_model, k.embedding_dim, k.created_at,
       (SELECT count(*) FROM onebox.kb_documents d WHERE d.collection = k.name) AS documents
FROM onebox.kb_collections k
WHERE left(k.name, length(%(prefix)s)) = %(prefix)s
ORDER BY k.name

-- name: tenant_documents
SELECT id, collection, source, source_type, title, n_chunks, metadata, created_at, updated_at
FROM onebox.kb_documents
WHERE left(collection, length(%(prefix)s)) = %(prefix)s
  AND (%(collection)s::text IS NULL OR collection = %(collection)s)
ORDER BY collection, source
LIMIT %(limit)s

-- name: tenant_document
SELECT id, collection, source FROM onebox.kb_documents
WHERE id = %(id)s AND left(collection, length(%(prefix)s)) = %(prefix)s

-- name: tenant_memories
SELECT id, scope, user_id, kind, content, summary, metadata, created_at, valid_from, invalid_at,
       superseded_by, access_count
FROM onebox.memories
WHERE left(scope, length(%(prefix)s)) = %(prefix)s
  AND (%(scope)s::text IS NULL OR scope = %(scope)s)
  AND (%(user_id)s::text IS NULL OR user_id = %(user_id)s)
ORDER BY created_at DESC
LIMIT %(limit)s

-- name: tenant_scopes
SELECT scope, count(*) AS memories, max(created_at) AS last_at
FROM onebox.memories
WHERE left(scope, length(%(prefix)s)) = %(prefix)s
GROUP BY scope ORDER BY scope

-- Knowledge base: collections, documents, chunks and their search.

-- name: get_collection
SELECT name, embedding_model, embedding_dim, created_at, updated_at
FROM onebox.kb_collections WHERE name = %(name)s

-- name: create_collection
INSERT INTO onebox.kb_collections (name, embedding_model, embedding_dim)
VALUES (%(name)s, %(model)s, %(dim)s) ON CONFLICT (name) DO NOTHING

-- name: set_collection_model
UPDATE onebox.kb_collections SET embedding_model = %(model)s, embedding_dim = %(dim)s,
    updated_at = now() WHERE name = %(name)s

-- name: list_collections
SELECT k.name, k.embedding_model, k.embedding_dim, k.created_at,
       (SELECT count(*) FROM onebox.kb_documents d WHERE d.collection = k.name) AS documents,
       (SELECT count(*) FROM onebox.kb_chunks c WHERE c.collection = k.name) AS chunks
FROM onebox.kb_collections k ORDER BY k.name

-- name: get_document
SELECT id, collection, source, source_type, title, content_hash, metadata, execution_id,
       snapshot_id, n_chunks, text_bytes, created_at, updated_at
FROM onebox.kb_documents WHERE collection = %(collection)s AND source = %(source)s

-- name: list_documents
SELECT id, collection, source, source_type, title, n_chunks, execution_id, snapshot_id,
       metadata, created_at, updated_at
FROM onebox.kb_documents
WHERE (%(collection)s::text IS NULL OR collection = %(collection)s)
ORDER BY collection, source LIMIT %(limit)s

-- name: upsert_document
INSERT INTO onebox.kb_documents (id, collection, source, source_type, title, content_hash,
                                 metadata, execution_id, snapshot_id, n_chunks, text, text_bytes)
VALUES (%(id)s, %(collection)s, %(source)s, %(source_type)s, %(title)s, %(content_hash)s,
        %(metadata)s, %(execution_id)s, %(snapshot_id)s, %(n_chunks)s, %(text)s, %(text_bytes)s)
ON CONFLICT (collection, source) DO UPDATE SET
    source_type = EXCLUDED.source_type, title = EXCLUDED.title,
    content_hash = EXCLUDED.content_hash, metadata = EXCLUDED.metadata,
    execution_id = EXCLUDED.execution_id, snapshot_id = EXCLUDED.snapshot_id,
    n_chunks = EXCLUDED.n_chunks, text = EXCLUDED.text, text_bytes = EXCLUDED.text_bytes,
    updated_at = now()
RETURNING id

-- name: set_document_text
-- An unchanged document ingested before documents kept their text (migration 0016).
UPDATE onebox.kb_documents SET text = %(text)s, text_bytes = %(text_bytes)s
WHERE id = %(id)s AND text IS NULL

-- name: find_documents
-- Candidates for knowledge_read among the caller's collections: the document id, its exact
-- source, or a source ending in "/<name>" (a path suffix). Never the text (see document_text).
SELECT id, collection, source, source_type, title, metadata, n_chunks, text_bytes,
       execution_id, snapshot_id, updated_at,
       ((id = %(id)s::uuid) IS TRUE OR source = %(document)s) AS exact
FROM onebox.kb_documents
WHERE collection = ANY(%(collections)s)
  AND ((id = %(id)s::uuid) IS TRUE OR source = %(document)s
       OR right(source, length(%(suffix)s)) = %(suffix)s)
ORDER BY exact DESC, collection, source LIMIT %(limit)s

-- name: document_text
SELECT text FROM onebox.kb_documents WHERE id = %(id)s

-- name: delete_document
DELETE FROM onebox.kb_documents WHERE id = %(id)s

-- name: document_chunks
SELECT id, content_hash FROM onebox.kb_chunks WHERE document_id = %(document_id)s ORDER BY ordinal

-- name: insert_chunks
INSERT INTO onebox.kb_chunks (document_id, collection, ordinal, content, content_hash, heading,
                              n_tokens, tsv, fts_len, embedding, metadata)
SELECT %(document_id)s, %(collection)s, t.ordinal, t.content, t.hash, t.heading, t.n_tokens,
       to_tsvector('english', t.seg),
       (SELECT coalesce(sum(cardinality(u.positions)), 0)
        FROM unnest(to_tsvector('english', t.seg)) AS u),
       t.embedding::vector, %(metadata)s
FROM unnest(%(ordinals)s::int[], %(contents)s::text[], %(hashes)s::text[], %(headings)s::text[],
            %(n_tokens)s::int[], %(segs)s::text[], %(embeddings)s::text[])
     AS t(ordinal, content, hash, heading, n_tokens, seg, embedding)
RETURNING id

-- name: update_ordinals
UPDATE onebox.kb_chunks c SET ordinal = u.ordinal, metadata = %(metadata)s
FROM unnest(%(ids)s::bigint[], %(ordinals)s::int[]) AS u(id, ordinal) WHERE c.id = u.id

-- name: delete_chunks
DELETE FROM onebox.kb_chunks WHERE id = ANY(%(ids)s)

-- name: chunks_of_collection
SELECT id, heading, content FROM onebox.kb_chunks WHERE collection = %(collection)s
ORDER BY id

-- name: set_embeddings
UPDATE onebox.kb_chunks c SET embedding = u.e::vector
FROM unnest(%(ids)s::bigint[], %(embeddings)s::text[]) AS u(id, e) WHERE c.id = u.id

-- name: hits
SELECT c.id AS chunk_id, c.ordinal, c.content, c.heading, c.metadata AS chunk_metadata,
       c.created_at, d.id AS document_id, d.collection, d.source, d.source_type, d.title,
       d.n_chunks, d.metadata AS document_metadata, d.execution_id, d.snapshot_id,
       d.updated_at AS document_updated_at
FROM onebox.kb_chunks c JOIN onebox.kb_documents d ON d.id = c.document_id
WHERE c.id = ANY(%(ids)s)

-- name: invalidate_cache
UPDATE onebox.answer_cache SET invalidated_at = now()
WHERE source_doc_ids && %(doc_ids)s::uuid[] AND invalidated_at IS NULL

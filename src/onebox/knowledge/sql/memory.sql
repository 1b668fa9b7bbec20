-- Memories: one row per remembered fact, per scope and user; archive for compaction.

-- name: find_hash
SELECT id FROM onebox.memories
WHERE scope = %(scope)s AND user_id = %(user_id)s AND content_hash = %(hash)s
  AND invalid_at IS NULL
ORDER BY created_at LIMIT 1

-- name: nearest
SELECT id, content, 1 - (embedding <=> %(q)s::vector) AS similarity FROM onebox.memories
WHERE scope = %(scope)s AND user_id = %(user_id)s AND invalid_at IS NULL
ORDER BY (embedding <=> %(q)s::vector) + 0 LIMIT %(n)s

-- name: nearest_ann
-- HNSW over every scope's rows; with pgvector >= 0.8 the caller scans iteratively
-- (relaxed order) until n rows of this scope pass, and the rows are re-sorted here.
WITH ann AS MATERIALIZED (
    SELECT id, content, embedding <=> %(q)s::vector AS distance FROM onebox.memories
    WHERE scope = %(scope)s AND user_id = %(user_id)s AND invalid_at IS NULL
    ORDER BY distance LIMIT %(n)s
)
SELECT id, content, 1 - distance AS similarity FROM ann ORDER BY distance

-- name: insert
INSERT INTO onebox.memories (id, scope, user_id, kind, content, content_hash, summary, entities,
                             metadata, embedding, tsv, fts_len, execution_id, valid_from,
                             happened_at, happened_precision, happened_text)
SELECT %(id)s, %(scope)s, %(user_id)s, %(kind)s, %(content)s, %(hash)s, %(summary)s,
       %(entities)s, %(metadata)s, %(embedding)s::vector, tsv,
       (SELECT coalesce(sum(cardinality(u.positions)), 0) FROM unnest(tsv) AS u),
       %(execution_id)s, coalesce(%(valid_from)s::timestamptz, now()),
       %(happened_at)s, %(happened_precision)s, %(happened_text)s
FROM (SELECT to_tsvector('english', %(seg)s) AS tsv) t

-- name: supersede
UPDATE onebox.memories SET invalid_at = now(), superseded_by = %(new_id)s
WHERE id = %(old_id)s AND invalid_at IS NULL AND scope = %(scope)s AND user_id = %(user_id)s
RETURNING id

-- name: get
SELECT id, scope, user_id, kind, content, summary, entities, metadata, valid_from, invalid_at,
       superseded_by, access_count, last_accessed_at, created_at, execution_id,
       happened_at, happened_precision, happened_text
FROM onebox.memories WHERE id = %(id)s

-- name: fulltext
-- BM25 as search.fulltext: each candidate's tsvector cut to the query's lexemes first.
SELECT m.id, sum(w.idf * x.tf * (%(k1)s + 1)
                 / (x.tf + %(k1)s * (1 - %(b)s + %(b)s * m.fts_len / %(avgdl)s))) AS score
FROM (SELECT r.id, r.tsv, r.fts_len FROM onebox.memories r
      WHERE r.tsv @@ %(tsquery)s::tsquery AND r.scope = %(scope)s AND r.user_id = %(user_id)s
        AND (%(current)s = false OR r.invalid_at IS NULL)
      LIMIT %(cap)s) m
CROSS JOIN LATERAL (
    SELECT u.lexeme, cardinality(u.positions)::float8 AS tf
    FROM unnest(ts_delete(m.tsv, tsvector_to_array(ts_delete(m.tsv, %(lexemes)s::text[])))) AS u) x
JOIN unnest(%(lexemes)s::text[], %(idfs)s::float8[]) AS w(lexeme, idf) ON w.lexeme = x.lexeme
GROUP BY m.id ORDER BY score DESC LIMIT %(n)s

-- name: count_scope
SELECT count(*) AS n FROM (SELECT 1 FROM onebox.memories
    WHERE scope = %(scope)s AND user_id = %(user_id)s LIMIT %(cap)s) s

-- name: vector_exact
SELECT id, 1 - (embedding <=> %(q)s::vector) AS score FROM onebox.memories
WHERE scope = %(scope)s AND user_id = %(user_id)s AND (%(current)s = false OR invalid_at IS NULL)
ORDER BY (embedding <=> %(q)s::vector) + 0 LIMIT %(n)s

-- name: vector_ann
-- As nearest_ann: iterative under pgvector >= 0.8, re-sorted.
WITH ann AS MATERIALIZED (
    SELECT id, embedding <=> %(q)s::vector AS distance FROM onebox.memories
    WHERE scope = %(scope)s AND user_id = %(user_id)s AND (%(current)s = false OR invalid_at IS NULL)
    ORDER BY distance LIMIT %(n)s
)
SELECT id, 1 - distance AS score FROM ann ORDER BY distance

-- name: touch
UPDATE onebox.memories SET access_count = access_count + 1, last_accessed_at = now()
WHERE id = ANY(%(ids)s)

-- name: delete
DELETE FROM onebox.memories WHERE id = %(id)s AND (%(user_id)s::text IS NULL OR user_id = %(user_id)s)
  AND (%(scope_prefix)s::text IS NULL OR starts_with(scope, %(scope_prefix)s))
RETURNING scope

-- name: delete_archived
DELETE FROM onebox.memories_archive
WHERE id = %(id)s AND (%(user_id)s::text IS NULL OR user_id = %(user_id)s)
  AND (%(scope_prefix)s::text IS NULL OR starts_with(scope, %(scope_prefix)s))
RETURNING id

-- name: compactable
SELECT id, scope, user_id, content, summary, created_at, happened_at FROM onebox.memories
WHERE (%(scope)s::text IS NULL OR scope = %(scope)s) AND kind <> 'summary'
  AND invalid_at IS NULL AND created_at < %(before)s AND access_count <= %(max_access)s
ORDER BY scope, user_id, created_at

-- name: archive
INSERT INTO onebox.memories_archive (id, scope, user_id, kind, content, content_hash, summary, entities, metadata, embedding,
    tsv, fts_len, execution_id, valid_from, invalid_at, superseded_by, access_count,
    last_accessed_at, created_at, happened_at, happened_precision, happened_text,
    archived_at, summary_id)
SELECT id, scope, user_id, kind, content, content_hash, summary, entities, metadata, embedding,
       tsv, fts_len, execution_id, valid_from, invalid_at, superseded_by, access_count,
       last_accessed_at, created_at, happened_at, happened_precision, happened_text, now(), %(summary_id)s
FROM onebox.memories m WHERE m.id = ANY(%(ids)s)

-- name: archived_of
SELECT id, scope FROM onebox.memories_archive WHERE summary_id = %(summary_id)s

-- name: unarchive
INSERT INTO onebox.memories (id, scope, user_id, kind, content, content_hash, summary, entities, metadata, embedding,
    tsv, fts_len, execution_id, valid_from, invalid_at, superseded_by, access_count,
    last_accessed_at, created_at, happened_at, happened_precision, happened_text)
SELECT id, scope, user_id, kind, content, content_hash, summary, entities, metadata, embedding,
       tsv, fts_len, execution_id, valid_from, invalid_at, superseded_by, access_count,
       last_accessed_at, created_at, happened_at, happened_precision, happened_text
FROM onebox.memories_archive WHERE summary_id = %(summary_id)s
RETURNING id, scope

-- name: drop_archive
DELETE FROM onebox.memories_archive WHERE summary_id = %(summary_id)s

-- name: delete_many
DELETE FROM onebox.memories WHERE id = ANY(%(ids)s)

-- name: by_ids
SELECT id, content, summary, kind, metadata, created_at, valid_from,
       happened_at, happened_precision, happened_text
FROM onebox.memories WHERE id = ANY(%(ids)s)

-- name: times
SELECT id, happened_at, happened_precision, happened_text
FROM onebox.memories WHERE id = ANY(%(ids)s) AND happened_at IS NOT NULL

-- name: scope_of
SELECT scope FROM onebox.memories
WHERE id = %(id)s AND (%(user_id)s::text IS NULL OR user_id = %(user_id)s)
  AND (%(scope_prefix)s::text IS NULL OR starts_with(scope, %(scope_prefix)s))

-- Hybrid search over kb_chunks (knowledge/search.py) and the full-text terms of a query.
-- Filters shared by the statements: collection list, metadata containment, date range.

-- name: collections
-- The searched collections and their model binding (no row counts: those scan the chunks).
SELECT name, embedding_model, embedding_dim FROM onebox.kb_collections
WHERE %(names)s::text[] IS NULL OR name = ANY(%(names)s::text[]) ORDER BY name

-- name: fts_terms
-- The query's lexemes with their BM25 idf and df over the given spaces, and the spaces'
-- average row length: one round trip instead of two (lexemes, then idf).
WITH l AS (
    SELECT DISTINCT lx AS lexeme FROM unnest(tsvector_to_array(to_tsvector('english', %(text)s))) AS lx
), stats AS (
    SELECT greatest(coalesce(sum(n_rows), 0), 1)::float8 AS n,
           greatest(coalesce(sum(total_len), 0)::float8 / greatest(coalesce(sum(n_rows), 0), 1), 1) AS avgdl
    FROM onebox.fts_spaces WHERE space = ANY(%(spaces)s)
)
SELECT l.lexeme, ln(1 + (stats.n - coalesce(t.df, 0) + 0.5) / (coalesce(t.df, 0) + 0.5)) AS idf,
       coalesce(t.df, 0) AS df, stats.n, stats.avgdl
FROM l CROSS JOIN stats
LEFT JOIN (SELECT lexeme, sum(df) AS df FROM onebox.fts_terms
           WHERE space = ANY(%(spaces)s) AND lexeme IN (SELECT lexeme FROM l) GROUP BY lexeme) t
       ON t.lexeme = l.lexeme
ORDER BY l.lexeme

-- name: fulltext
-- BM25 over at most %(cap)s rows the GIN index selects. Each candidate's tsvector is first cut
-- down to the query's lexemes (ts_delete of everything else, in C) so the per-candidate unnest
-- and join handle a few terms, not every word of the chunk (~1.6x faster at 1,000 candidates).
SELECT c.id, sum(w.idf * x.tf * (%(k1)s + 1)
                 / (x.tf + %(k1)s * (1 - %(b)s + %(b)s * c.fts_len / %(avgdl)s))) AS score
FROM (SELECT k.id, k.tsv, k.fts_len FROM onebox.kb_chunks k
      WHERE k.tsv @@ %(tsquery)s::tsquery AND k.collection = ANY(%(collections)s)
        AND (%(meta)s::jsonb IS NULL OR k.metadata @> %(meta)s::jsonb)
        AND (%(since)s::timestamptz IS NULL OR k.created_at >= %(since)s::timestamptz)
        AND (%(until)s::timestamptz IS NULL OR k.created_at < %(until)s::timestamptz)
      LIMIT %(cap)s) c
CROSS JOIN LATERAL (
    SELECT u.lexeme, cardinality(u.positions)::float8 AS tf
    FROM unnest(ts_delete(c.tsv, tsvector_to_array(ts_delete(c.tsv, %(lexemes)s::text[])))) AS u) x
JOIN unnest(%(lexemes)s::text[], %(idfs)s::float8[]) AS w(lexeme, idf) ON w.lexeme = x.lexeme
GROUP BY c.id ORDER BY score DESC LIMIT %(n)s

-- name: count_filtered
SELECT count(*) AS n FROM (
    SELECT 1 FROM onebox.kb_chunks c
    WHERE c.collection = ANY(%(collections)s)
      AND (%(meta)s::jsonb IS NULL OR c.metadata @> %(meta)s::jsonb)
      AND (%(since)s::timestamptz IS NULL OR c.created_at >= %(since)s::timestamptz)
      AND (%(until)s::timestamptz IS NULL OR c.created_at < %(until)s::timestamptz)
    LIMIT %(cap)s) s

-- name: vector_ann
-- HNSW. With pgvector >= 0.8 the caller sets hnsw.iterative_scan = relaxed_order, so the scan
-- continues until n rows pass the filter; relaxed order is re-sorted here.
WITH ann AS MATERIALIZED (
    SELECT c.id, c.embedding <=> %(q)s::vector AS distance FROM onebox.kb_chunks c
    WHERE c.collection = ANY(%(collections)s)
      AND (%(meta)s::jsonb IS NULL OR c.metadata @> %(meta)s::jsonb)
      AND (%(since)s::timestamptz IS NULL OR c.created_at >= %(since)s::timestamptz)
      AND (%(until)s::timestamptz IS NULL OR c.created_at < %(until)s::timestamptz)
    ORDER BY distance LIMIT %(n)s
)
SELECT id, 1 - distance AS score FROM ann ORDER BY distance

-- name: vector_exact
-- The "+ 0" hides the ordering from the HNSW index: an exact scan over the filtered rows.
SELECT c.id, 1 - (c.embedding <=> %(q)s::vector) AS score FROM onebox.kb_chunks c
WHERE c.collection = ANY(%(collections)s)
  AND (%(meta)s::jsonb IS NULL OR c.metadata @> %(meta)s::jsonb)
  AND (%(since)s::timestamptz IS NULL OR c.created_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR c.created_at < %(until)s::timestamptz)
ORDER BY (c.embedding <=> %(q)s::vector) + 0 LIMIT %(n)s

-- name: collection_sizes
SELECT space, n_rows FROM onebox.fts_spaces WHERE space LIKE 'kb:%%'

-- name: pgvector_version
SELECT extversion FROM pg_extension WHERE extname = 'vector'

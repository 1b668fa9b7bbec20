-- name: lookup
SELECT content_hash, embedding::text AS embedding
FROM onebox.embedding_cache
WHERE model = %(model)s AND kind = %(kind)s AND content_hash = ANY(%(hashes)s)

-- name: store
INSERT INTO onebox.embedding_cache (model, kind, content_hash, embedding)
SELECT %(model)s, %(kind)s, h, e::vector
FROM unnest(%(hashes)s::text[], %(vectors)s::text[]) AS t(h, e)
ON CONFLICT DO NOTHING

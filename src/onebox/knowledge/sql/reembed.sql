-- name: memories_page
SELECT id, content, metadata->>'context' AS context
FROM onebox.memories
WHERE id::text > %(after)s
ORDER BY id::text
LIMIT %(limit)s

-- name: count_memories
SELECT count(*) AS n FROM onebox.memories

-- name: set_memory_embeddings
UPDATE onebox.memories AS m SET embedding = t.e::vector
FROM unnest(%(ids)s::uuid[], %(embeddings)s::text[]) AS t(id, e)
WHERE m.id = t.id

-- Semantic answer cache.

-- name: put
INSERT INTO onebox.answer_cache (id, scope, question, question_hash, answer, embedding,
                                 source_doc_ids, expires_at)
VALUES (%(id)s, %(scope)s, %(question)s, %(hash)s, %(answer)s, %(embedding)s::vector,
        %(sources)s::uuid[], now() + make_interval(secs => %(ttl_s)s))

-- name: retire_same_question
UPDATE onebox.answer_cache SET invalidated_at = now()
WHERE scope = %(scope)s AND question_hash = %(hash)s AND invalidated_at IS NULL

-- name: candidates
SELECT id, question, answer, hit_count, source_doc_ids, created_at,
       1 - (embedding <=> %(q)s::vector) AS similarity
FROM onebox.answer_cache
WHERE scope = %(scope)s AND invalidated_at IS NULL AND (expires_at IS NULL OR expires_at > now())
ORDER BY embedding <=> %(q)s::vector LIMIT %(n)s

-- name: hit
UPDATE onebox.answer_cache SET hit_count = hit_count + 1, last_hit_at = now()
WHERE id = %(id)s RETURNING hit_count

-- name: invalidate_sources
UPDATE onebox.answer_cache SET invalidated_at = now()
WHERE source_doc_ids && %(doc_ids)s::uuid[] AND invalidated_at IS NULL

-- name: invalidate_entry
UPDATE onebox.answer_cache SET invalidated_at = now()
WHERE id = %(id)s AND invalidated_at IS NULL

-- name: stats
SELECT count(*) FILTER (WHERE invalidated_at IS NULL AND (expires_at IS NULL OR expires_at > now()))
           AS live,
       count(*) AS total, coalesce(sum(hit_count), 0) AS hits
FROM onebox.answer_cache WHERE scope = %(scope)s

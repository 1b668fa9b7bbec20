-- Term statistics for BM25, per search space ('kb:<collection>' / 'mem:<scope>').

-- name: lexemes
SELECT coalesce(array_agg(lx ORDER BY lx), '{}') AS lexemes
FROM unnest(tsvector_to_array(to_tsvector('english', %(text)s))) AS lx

-- name: add_kb_terms
WITH rows AS (SELECT tsv, fts_len FROM onebox.kb_chunks WHERE id = ANY(%(ids)s)),
terms AS (
    INSERT INTO onebox.fts_terms (space, lexeme, df)
    SELECT %(space)s, lx, count(*) FROM rows, unnest(tsvector_to_array(rows.tsv)) AS lx
    GROUP BY lx ORDER BY lx
    ON CONFLICT (space, lexeme) DO UPDATE SET df = onebox.fts_terms.df + EXCLUDED.df
    RETURNING 1
)
INSERT INTO onebox.fts_spaces (space, n_rows, total_len)
SELECT %(space)s, count(*), coalesce(sum(fts_len), 0) FROM rows
ON CONFLICT (space) DO UPDATE SET n_rows = onebox.fts_spaces.n_rows + EXCLUDED.n_rows,
    total_len = onebox.fts_spaces.total_len + EXCLUDED.total_len

-- name: remove_kb_terms
WITH rows AS (SELECT tsv, fts_len FROM onebox.kb_chunks WHERE id = ANY(%(ids)s)),
terms AS (
    UPDATE onebox.fts_terms t SET df = t.df - d.n
    FROM (SELECT lx, count(*) AS n FROM rows, unnest(tsvector_to_array(rows.tsv)) AS lx
          GROUP BY lx) d
    WHERE t.space = %(space)s AND t.lexeme = d.lx
    RETURNING 1
)
UPDATE onebox.fts_spaces s SET n_rows = s.n_rows - d.n, total_len = s.total_len - d.len
FROM (SELECT count(*) AS n, coalesce(sum(fts_len), 0) AS len FROM rows) d
WHERE s.space = %(space)s

-- name: add_memory_terms
WITH rows AS (SELECT tsv, fts_len FROM onebox.memories WHERE id = ANY(%(ids)s)),
terms AS (
    INSERT INTO onebox.fts_terms (space, lexeme, df)
    SELECT %(space)s, lx, count(*) FROM rows, unnest(tsvector_to_array(rows.tsv)) AS lx
    GROUP BY lx ORDER BY lx
    ON CONFLICT (space, lexeme) DO UPDATE SET df = onebox.fts_terms.df + EXCLUDED.df
    RETURNING 1
)
INSERT INTO onebox.fts_spaces (space, n_rows, total_len)
SELECT %(space)s, count(*), coalesce(sum(fts_len), 0) FROM rows
ON CONFLICT (space) DO UPDATE SET n_rows = onebox.fts_spaces.n_rows + EXCLUDED.n_rows,
    total_len = onebox.fts_spaces.total_len + EXCLUDED.total_len

-- name: remove_memory_terms
WITH rows AS (SELECT tsv, fts_len FROM onebox.memories WHERE id = ANY(%(ids)s)),
terms AS (
    UPDATE onebox.fts_terms t SET df = t.df - d.n
    FROM (SELECT lx, count(*) AS n FROM rows, unnest(tsvector_to_array(rows.tsv)) AS lx
          GROUP BY lx) d
    WHERE t.space = %(space)s AND t.lexeme = d.lx
    RETURNING 1
)
UPDATE onebox.fts_spaces s SET n_rows = s.n_rows - d.n, total_len = s.total_len - d.len
FROM (SELECT count(*) AS n, coalesce(sum(fts_len), 0) AS len FROM rows) d
WHERE s.space = %(space)s

-- name: idf
-- BM25 idf of each query lexeme over the given spaces, with the average row length.
WITH stats AS (
    SELECT greatest(coalesce(sum(n_rows), 0), 1)::float8 AS n,
           greatest(coalesce(sum(total_len), 0)::float8 / greatest(coalesce(sum(n_rows), 0), 1), 1) AS avgdl
    FROM onebox.fts_spaces WHERE space = ANY(%(spaces)s)
)
SELECT l.lexeme, ln(1 + (stats.n - coalesce(t.df, 0) + 0.5) / (coalesce(t.df, 0) + 0.5)) AS idf,
       coalesce(t.df, 0) AS df, stats.n, stats.avgdl
FROM unnest(%(lexemes)s::text[]) AS l(lexeme)
CROSS JOIN stats
LEFT JOIN (SELECT lexeme, sum(df) AS df FROM onebox.fts_terms
           WHERE space = ANY(%(spaces)s) AND lexeme = ANY(%(lexemes)s) GROUP BY lexeme) t
       ON t.lexeme = l.lexeme

-- Term statistics for BM25, per search space ('kb:<collection>' / 'mem:<scope>').

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

-- The tool catalog: tools (nodes) and tool_edges (typed edges). See onebox.store.catalog.

-- name: upsert_tool
INSERT INTO onebox.tools
    (name, description, builtin, language, input_schema, code_template, permissions)
VALUES (%(name)s, %(description)s, false, %(language)s, %(input_schema)s, %(code_template)s,
        %(permissions)s)
ON CONFLICT (name) DO UPDATE SET
    description = EXCLUDED.description, language = EXCLUDED.language,
    input_schema = EXCLUDED.input_schema, code_template = EXCLUDED.code_template,
    permissions = EXCLUDED.permissions, updated_at = now()
WHERE NOT onebox.tools.builtin
RETURNING name;

-- name: delete_edges
DELETE FROM onebox.tool_edges WHERE src = %(name)s;

-- name: insert_edge
INSERT INTO onebox.tool_edges (src, type, dst) VALUES (%(src)s, %(type)s, %(dst)s)
ON CONFLICT DO NOTHING;

-- name: delete_tool
DELETE FROM onebox.tools WHERE name = %(name)s AND NOT builtin RETURNING name;

-- name: cost_classes
SELECT name FROM onebox.cost_classes ORDER BY rank;

-- name: tools
SELECT t.*,
       coalesce((SELECT e.dst FROM onebox.tool_edges e
                 WHERE e.src = t.name AND e.type = 'COSTS' LIMIT 1), 'LOW') AS cost_class,
       ARRAY(SELECT e.dst FROM onebox.tool_edges e
             WHERE e.src = t.name AND e.type = 'SUPPORTS_FORMAT' ORDER BY e.dst) AS formats,
       ARRAY(SELECT e.dst FROM onebox.tool_edges e
             WHERE e.src = t.name AND e.type = 'REQUIRES' ORDER BY e.dst) AS requires,
       ARRAY(SELECT e.dst FROM onebox.tool_edges e
             WHERE e.src = t.name AND e.type = 'ALTERNATIVE_TO' ORDER BY e.dst) AS alternatives
FROM onebox.tools t
WHERE %(name)s::text IS NULL OR t.name = %(name)s
ORDER BY t.builtin DESC, t.name;

-- name: rank_tools
-- Tools that support the format, whose whole REQUIRES closure is registered and that cost at
-- most max_cost (a tool costs as much as the most expensive tool it needs), best historical
-- success rate first. The success rate comes from task_execution grouped by tool and status;
-- the score is the Laplace-smoothed rate, so a tool with no history scores one half.
WITH RECURSIVE
candidates AS (
    SELECT DISTINCT e.src AS name
    FROM onebox.tool_edges e
    WHERE e.type = 'SUPPORTS_FORMAT' AND e.dst = lower(%(format)s)
),
closure (root, tool, path, missing) AS (
    SELECT c.name, c.name, ARRAY[c.name], false
    FROM candidates c
  UNION ALL
    SELECT cl.root, e.dst, cl.path || e.dst, t.name IS NULL
    FROM closure cl
    JOIN onebox.tool_edges e ON e.src = cl.tool AND e.type = 'REQUIRES'
    LEFT JOIN onebox.tools t ON t.name = e.dst
    WHERE NOT cl.missing AND NOT e.dst = ANY (cl.path)
),
effective AS (
    SELECT cl.root,
           max(coalesce(cc.rank, 1)) AS cost_rank,
           bool_or(cl.missing) AS missing,
           coalesce(array_agg(DISTINCT cl.tool ORDER BY cl.tool)
                    FILTER (WHERE cl.tool <> cl.root), '{}') AS requires
    FROM closure cl
    LEFT JOIN onebox.tool_edges ce ON ce.src = cl.tool AND ce.type = 'COSTS'
    LEFT JOIN onebox.cost_classes cc ON cc.name = ce.dst
    GROUP BY cl.root
),
by_status AS (
    SELECT tool_name, status, count(*) AS n
    FROM onebox.task_execution
    WHERE status IN ('SUCCESS', 'FAILED', 'TIMEOUT')
    GROUP BY tool_name, status
),
history AS (
    SELECT tool_name,
           sum(n) FILTER (WHERE status = 'SUCCESS') AS successes,
           sum(n) AS finished
    FROM by_status
    GROUP BY tool_name
)
SELECT t.name, t.description, t.builtin,
       (SELECT name FROM onebox.cost_classes WHERE rank = ef.cost_rank) AS cost_class,
       ef.requires,
       ARRAY(SELECT CASE WHEN a.src = t.name THEN a.dst ELSE a.src END
             FROM onebox.tool_edges a
             WHERE a.type = 'ALTERNATIVE_TO' AND (a.src = t.name OR a.dst = t.name)
             ORDER BY 1) AS alternatives,
       coalesce(h.successes, 0)::int AS successes,
       coalesce(h.finished, 0)::int AS runs,
       h.successes::float8 / nullif(h.finished, 0) AS success_rate,
       (coalesce(h.successes, 0) + 1)::float8 / (coalesce(h.finished, 0) + 2) AS score
FROM effective ef
JOIN onebox.tools t ON t.name = ef.root
JOIN onebox.cost_classes max_cost ON max_cost.name = upper(%(max_cost)s)
LEFT JOIN history h ON h.tool_name = ef.root
WHERE NOT ef.missing AND ef.cost_rank <= max_cost.rank
ORDER BY score DESC, runs DESC, ef.cost_rank, t.name
LIMIT %(limit)s;

-- name: tool_names
SELECT name FROM onebox.tools ORDER BY name;

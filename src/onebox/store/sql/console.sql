-- Reads the console needs beyond the run views: usage per run, a run's model calls.

-- name: runs_usage
-- Tokens and cost of a page of runs (cost NULL when no call had a known price).
SELECT run_id, sum(prompt_tokens + completion_tokens)::bigint AS tokens,
       sum(cost_usd)::float8 AS cost_usd, count(*) AS model_calls
FROM onebox.llm_calls WHERE run_id = ANY(%(run_ids)s::uuid[])
GROUP BY run_id;

-- name: run_model_calls
SELECT id, step_id, action_id, purpose, model, prompt_tokens, completion_tokens,
       cost_usd::float8 AS cost_usd, latency_ms, error, created_at
FROM onebox.llm_calls WHERE run_id = %(run_id)s ORDER BY id;

-- name: run_model_call
SELECT id, step_id, action_id, purpose, model, messages, response, prompt_tokens,
       completion_tokens, cost_usd::float8 AS cost_usd, latency_ms, error, created_at
FROM onebox.llm_calls WHERE run_id = %(run_id)s AND id = %(call_id)s;

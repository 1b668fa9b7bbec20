-- The model transcript: one row per model call. See onebox.store.llm_calls (and
-- onebox.runtime.model_calls, which performs the call and builds the row).

-- name: insert_llm_call
INSERT INTO onebox.llm_calls
    (run_id, step_id, action_id, purpose, model, messages, request, response,
     prompt_tokens, completion_tokens, latency_ms, cost_usd, error)
VALUES (%(run_id)s, %(step_id)s, %(action_id)s, %(purpose)s, %(model)s, %(messages)s,
        %(request)s, %(response)s, %(prompt_tokens)s, %(completion_tokens)s, %(latency_ms)s,
        %(cost_usd)s, %(error)s)
RETURNING id;

-- name: llm_calls_of_run
SELECT * FROM onebox.llm_calls WHERE run_id = %(run_id)s ORDER BY id;

-- name: llm_usage_of_run
SELECT count(*)::int AS calls,
       coalesce(sum(prompt_tokens), 0)::int AS prompt_tokens,
       coalesce(sum(completion_tokens), 0)::int AS completion_tokens,
       coalesce(sum(cost_usd), 0)::float8 AS cost_usd,
       count(*) FILTER (WHERE cost_usd IS NULL AND error IS NULL)::int AS unpriced_calls,
       coalesce(sum(latency_ms), 0)::float8 AS latency_ms
FROM onebox.llm_calls WHERE run_id = %(run_id)s;

-- onebox 0005: the model transcript (one row per model call) and the tool catalog graph.

CREATE TABLE onebox.llm_calls (
    id                bigserial PRIMARY KEY,
    run_id            uuid REFERENCES onebox.runs(id) ON DELETE CASCADE,
    step_id           text,
    action_id         text,
    purpose           text,
    model             text             NOT NULL,
    messages          jsonb            NOT NULL,
    request           jsonb            NOT NULL DEFAULT '{}'::jsonb,
    response          jsonb,
    prompt_tokens     int              NOT NULL DEFAULT 0 CHECK (prompt_tokens >= 0),
    completion_tokens int              NOT NULL DEFAULT 0 CHECK (completion_tokens >= 0),
    latency_ms        double precision,
    cost_usd          numeric(16, 8),
    error             text,
    created_at        timestamptz      NOT NULL DEFAULT now(),
    CONSTRAINT response_or_error CHECK (response IS NOT NULL OR error IS NOT NULL)
);
CREATE INDEX llm_calls_run_idx ON onebox.llm_calls (run_id, id);

-- Tool catalog: tools are nodes; typed edges point at other tools (REQUIRES,
-- ALTERNATIVE_TO), at formats (SUPPORTS_FORMAT, lowercase) or at cost classes (COSTS).
CREATE TABLE onebox.cost_classes (
    name text PRIMARY KEY,
    rank int  NOT NULL UNIQUE
);
INSERT INTO onebox.cost_classes (name, rank) VALUES
    ('FREE', 0), ('LOW', 1), ('MEDIUM', 2), ('HIGH', 3);

CREATE TABLE onebox.tools (
    name          text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_.-]{0,63}$'),
    description   text        NOT NULL,
    builtin       boolean     NOT NULL DEFAULT false,
    language      text        CHECK (language IN ('python', 'bash', 'node')),
    input_schema  jsonb       NOT NULL DEFAULT '{"type": "object"}'::jsonb,
    code_template text,
    permissions   jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE onebox.tool_edges (
    src  text NOT NULL REFERENCES onebox.tools(name) ON DELETE CASCADE,
    type text NOT NULL CHECK (type IN ('REQUIRES', 'SUPPORTS_FORMAT', 'ALTERNATIVE_TO', 'COSTS')),
    dst  text NOT NULL,
    PRIMARY KEY (src, type, dst),
    CHECK (type <> 'SUPPORTS_FORMAT' OR dst = lower(dst))
);
CREATE INDEX tool_edges_dst_idx ON onebox.tool_edges (type, dst);

INSERT INTO onebox.tools (name, description, builtin, language, input_schema, permissions) VALUES
 ('python', 'Run Python 3 code in the sandbox (standard library; files in the run workspace)',
  true, 'python', '{"type": "object", "properties": {"code": {"type": "string"}}}', '{}'),
 ('bash', 'Run a bash script in the sandbox (coreutils, text processing)',
  true, 'bash', '{"type": "object", "properties": {"code": {"type": "string"}}}', '{}'),
 ('node', 'Run JavaScript with Node.js in the sandbox',
  true, 'node', '{"type": "object", "properties": {"code": {"type": "string"}}}', '{}'),
 ('http', 'Fetch a URL through the egress proxy; only domains granted to the step',
  true, NULL, '{"type": "object", "required": ["url"], "properties": {"url": {"type": "string"}, "method": {"type": "string"}}}',
  '{"network": "allow_domains"}'),
 ('knowledge_search', 'Hybrid full-text and vector search over the knowledge base',
  true, NULL, '{"type": "object", "required": ["query"], "properties": {"query": {"type": "string"}, "top_k": {"type": "integer"}}}', '{}'),
 ('memory_remember', 'Store a fact in long-term memory',
  true, NULL, '{"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}, "scope": {"type": "string"}}}', '{}'),
 ('memory_recall', 'Recall remembered facts similar to a query',
  true, NULL, '{"type": "object", "required": ["query"], "properties": {"query": {"type": "string"}, "scope": {"type": "string"}}}', '{}'),
 ('approval', 'Pause the run until a person approves or refuses',
  true, NULL, '{"type": "object", "required": ["prompt"], "properties": {"prompt": {"type": "string"}}}', '{}'),
 ('final_answer', 'Write the answer of the run from earlier outputs',
  true, NULL, '{"type": "object", "required": ["answer"], "properties": {"answer": {"type": "string"}}}', '{}');

INSERT INTO onebox.tool_edges (src, type, dst) VALUES
 ('python', 'COSTS', 'LOW'), ('bash', 'COSTS', 'LOW'), ('node', 'COSTS', 'LOW'),
 ('http', 'COSTS', 'MEDIUM'), ('knowledge_search', 'COSTS', 'LOW'),
 ('memory_remember', 'COSTS', 'FREE'), ('memory_recall', 'COSTS', 'FREE'),
 ('approval', 'COSTS', 'HIGH'), ('final_answer', 'COSTS', 'FREE'),
 ('python', 'SUPPORTS_FORMAT', 'csv'), ('python', 'SUPPORTS_FORMAT', 'json'),
 ('python', 'SUPPORTS_FORMAT', 'txt'), ('python', 'SUPPORTS_FORMAT', 'xml'),
 ('python', 'SUPPORTS_FORMAT', 'html'), ('python', 'SUPPORTS_FORMAT', 'md'),
 ('bash', 'SUPPORTS_FORMAT', 'txt'), ('bash', 'SUPPORTS_FORMAT', 'csv'),
 ('node', 'SUPPORTS_FORMAT', 'json'), ('node', 'SUPPORTS_FORMAT', 'txt'),
 ('node', 'SUPPORTS_FORMAT', 'html'),
 ('http', 'SUPPORTS_FORMAT', 'html'), ('http', 'SUPPORTS_FORMAT', 'json'),
 ('knowledge_search', 'SUPPORTS_FORMAT', 'pdf'), ('knowledge_search', 'SUPPORTS_FORMAT', 'docx'),
 ('knowledge_search', 'SUPPORTS_FORMAT', 'md'), ('knowledge_search', 'SUPPORTS_FORMAT', 'txt'),
 ('knowledge_search', 'SUPPORTS_FORMAT', 'html'),
 ('memory_remember', 'SUPPORTS_FORMAT', 'txt'), ('memory_recall', 'SUPPORTS_FORMAT', 'txt'),
 ('final_answer', 'SUPPORTS_FORMAT', 'txt'), ('final_answer', 'SUPPORTS_FORMAT', 'md'),
 ('python', 'ALTERNATIVE_TO', 'node'), ('bash', 'ALTERNATIVE_TO', 'python'),
 ('memory_recall', 'ALTERNATIVE_TO', 'knowledge_search');

-- onebox 0016: a knowledge document keeps its original text (issue 13, point 4).
-- Chunks overlap and chunking joins sentences with spaces (a CSV's newlines are lost), so
-- a whole document cannot be rebuilt from its chunks: ingestion stores the text it parsed,
-- bounded by knowledge.parse_max_bytes. Rows ingested before this migration have no text
-- (NULL); reading one says so and how to re-ingest it.
ALTER TABLE onebox.kb_documents
    ADD COLUMN text       text,
    ADD COLUMN text_bytes bigint CHECK (text_bytes >= 0);

-- knowledge_read: reads one stored document whole (a step kind, not a sandboxed tool).
INSERT INTO onebox.tools (name, description, builtin, language, input_schema, permissions) VALUES
 ('knowledge_read',
  'Read one knowledge-base document whole (its original text and metadata), by the document id a knowledge_search hit names or by its source path',
  true, NULL,
  '{"type": "object", "required": ["document"], "properties": {"document": {"type": "string"}, "collection": {"type": "string"}, "max_bytes": {"type": "integer", "minimum": 1, "maximum": 4194304}}}',
  '{}')
ON CONFLICT (name) DO NOTHING;

-- The formats it is ranked for are those whose original text is the data (a PDF's or a
-- DOCX's text is extracted, and knowledge_search covers them).
INSERT INTO onebox.tool_edges (src, type, dst) VALUES
 ('knowledge_read', 'COSTS', 'FREE'),
 ('knowledge_read', 'SUPPORTS_FORMAT', 'csv'), ('knowledge_read', 'SUPPORTS_FORMAT', 'txt'),
 ('knowledge_read', 'SUPPORTS_FORMAT', 'md'), ('knowledge_read', 'SUPPORTS_FORMAT', 'json')
ON CONFLICT DO NOTHING;

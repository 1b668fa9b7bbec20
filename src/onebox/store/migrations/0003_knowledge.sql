-- onebox 0003: knowledge base, memories, semantic answer cache, embedding cache.
-- Vectors are 384-d (multilingual-e5-small); other models must produce 384-d
-- vectors too (OpenAI-compatible endpoints are asked for `dimensions=384`).

-- Every embedding ever computed, keyed by model + kind + sha256(text): never embed twice.
CREATE TABLE onebox.embedding_cache (
    model        text        NOT NULL,
    kind         text        NOT NULL CHECK (kind IN ('query','passage')),
    content_hash char(64)    NOT NULL,
    embedding    vector(384) NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, kind, content_hash)
);

-- Document frequencies for BM25, per search space ('kb:<collection>' or 'mem:<scope>').
CREATE TABLE onebox.fts_terms (
    space  text   NOT NULL,
    lexeme text   NOT NULL,
    df     bigint NOT NULL,
    PRIMARY KEY (space, lexeme)
);
CREATE TABLE onebox.fts_spaces (
    space     text   PRIMARY KEY,
    n_rows    bigint NOT NULL DEFAULT 0,
    total_len bigint NOT NULL DEFAULT 0
);

CREATE TABLE onebox.kb_collections (
    name            text PRIMARY KEY,
    embedding_model text        NOT NULL,
    embedding_dim   int         NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE onebox.kb_documents (
    id           uuid PRIMARY KEY,
    collection   text        NOT NULL REFERENCES onebox.kb_collections(name) ON DELETE CASCADE,
    source       text        NOT NULL,
    source_type  text        NOT NULL,
    title        text,
    content_hash char(64)    NOT NULL,
    metadata     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    execution_id uuid REFERENCES onebox.task_execution(id) ON DELETE SET NULL,
    snapshot_id  text,
    n_chunks     int         NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (collection, source)
);

CREATE TABLE onebox.kb_chunks (
    id           bigserial PRIMARY KEY,
    document_id  uuid        NOT NULL REFERENCES onebox.kb_documents(id) ON DELETE CASCADE,
    collection   text        NOT NULL,
    ordinal      int         NOT NULL,
    content      text        NOT NULL,
    content_hash char(64)    NOT NULL,
    heading      text,
    n_tokens     int         NOT NULL,
    tsv          tsvector    NOT NULL,
    fts_len      int         NOT NULL,
    embedding    vector(384) NOT NULL,
    metadata     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX kb_chunks_doc_idx ON onebox.kb_chunks (document_id, content_hash);
CREATE INDEX kb_chunks_collection_idx ON onebox.kb_chunks (collection, created_at);
CREATE INDEX kb_chunks_tsv_idx ON onebox.kb_chunks USING gin (tsv);
CREATE INDEX kb_chunks_meta_idx ON onebox.kb_chunks USING gin (metadata jsonb_path_ops);
CREATE INDEX kb_chunks_vec_idx ON onebox.kb_chunks USING hnsw (embedding vector_cosine_ops);

CREATE TABLE onebox.memories (
    id               uuid PRIMARY KEY,
    scope            text        NOT NULL,
    user_id          text        NOT NULL DEFAULT '',
    kind             text        NOT NULL DEFAULT 'short' CHECK (kind IN ('short','long','summary')),
    content          text        NOT NULL,
    content_hash     char(64)    NOT NULL,
    summary          text        NOT NULL,
    entities         text[]      NOT NULL DEFAULT '{}',
    metadata         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    embedding        vector(384) NOT NULL,
    tsv              tsvector    NOT NULL,
    fts_len          int         NOT NULL,
    execution_id     uuid REFERENCES onebox.task_execution(id) ON DELETE SET NULL,
    valid_from       timestamptz NOT NULL DEFAULT now(),
    invalid_at       timestamptz,
    superseded_by    uuid,
    access_count     int         NOT NULL DEFAULT 0,
    last_accessed_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX memories_scope_idx ON onebox.memories (scope, user_id, created_at);
CREATE INDEX memories_hash_idx ON onebox.memories (scope, user_id, content_hash);
CREATE INDEX memories_tsv_idx ON onebox.memories USING gin (tsv);
CREATE INDEX memories_vec_idx ON onebox.memories USING hnsw (embedding vector_cosine_ops);

-- Originals condensed by `memory compact`; restorable row for row.
CREATE TABLE onebox.memories_archive (
    LIKE onebox.memories,
    archived_at timestamptz NOT NULL DEFAULT now(),
    summary_id  uuid        NOT NULL,
    PRIMARY KEY (id)
);
CREATE INDEX memories_archive_summary_idx ON onebox.memories_archive (summary_id);

CREATE TABLE onebox.answer_cache (
    id             uuid PRIMARY KEY,
    scope          text        NOT NULL DEFAULT 'default',
    question       text        NOT NULL,
    question_hash  char(64)    NOT NULL,
    answer         text        NOT NULL,
    embedding      vector(384) NOT NULL,
    source_doc_ids uuid[]      NOT NULL DEFAULT '{}',
    hit_count      int         NOT NULL DEFAULT 0,
    last_hit_at    timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz,
    invalidated_at timestamptz
);
CREATE INDEX answer_cache_scope_idx ON onebox.answer_cache (scope, question_hash);
CREATE INDEX answer_cache_sources_idx ON onebox.answer_cache USING gin (source_doc_ids);

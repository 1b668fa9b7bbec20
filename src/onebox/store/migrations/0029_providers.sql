-- Model endpoints the operator declares (`onebox provider add`). No tenant column: a
-- provider is the operator's; tenants' profiles name one and a model, never a URL or a key.
CREATE TABLE IF NOT EXISTS onebox.providers (
    name       text PRIMARY KEY,
    spec       jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- onebox 0025: when a remembered fact happened (issue 16.5).
-- happened_at: the time the fact refers to, resolved from the text ("yesterday", "两年前",
-- "8 May 2023") against the conversation's date, or that date itself; NULL when unknown.
-- happened_precision: how exact it is (minute, day, week, month, year).
-- happened_text: the phrase it came from, NULL when it is the conversation's date.
ALTER TABLE onebox.memories
    ADD COLUMN happened_at        timestamptz,
    ADD COLUMN happened_precision text CHECK (happened_precision IN ('minute','day','week','month','year')),
    ADD COLUMN happened_text      text;
-- The archive keeps whole rows; its columns are listed by name when rows move (memory.sql).
ALTER TABLE onebox.memories_archive
    ADD COLUMN happened_at        timestamptz,
    ADD COLUMN happened_precision text,
    ADD COLUMN happened_text      text;
CREATE INDEX memories_happened_idx ON onebox.memories (scope, user_id, happened_at)
    WHERE happened_at IS NOT NULL;

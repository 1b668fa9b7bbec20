-- A run's final answer (the agent's Finish answer, or a plan's final step), written in the
-- transaction that finishes the run; NULL for a run that has none (a plain plan file, a
-- failed run). Bounded: onebox.runtime.archive.MAX_ANSWER_CHARS keeps the head of a longer one.
ALTER TABLE onebox.runs ADD COLUMN answer text
    CONSTRAINT runs_answer_bounded CHECK (char_length(answer) <= 64000);

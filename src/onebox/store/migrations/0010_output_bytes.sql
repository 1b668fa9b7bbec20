-- onebox 0010: a step's output is bytes. stdout/stderr stay the text view for people
-- (NUL and invalid UTF-8 shown as U+FFFD, the last 64,000 characters); stdout_bytes and
-- stderr_bytes hold the captured bytes exactly whenever that text view is not them (a NUL,
-- invalid UTF-8, or more than the text keeps). NULL means the text column is the output.
ALTER TABLE onebox.task_execution ADD COLUMN stdout_bytes bytea, ADD COLUMN stderr_bytes bytea;

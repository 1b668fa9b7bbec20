-- onebox 0008: an attempt that waits for a person (an approval) is PENDING with waiting_for
-- set; the queue never claims it until the decision clears it.
ALTER TABLE onebox.task_execution ADD COLUMN waiting_for text;
DROP INDEX onebox.task_execution_queue_idx;
CREATE INDEX task_execution_queue_idx ON onebox.task_execution (available_at)
    WHERE status = 'PENDING' AND waiting_for IS NULL;

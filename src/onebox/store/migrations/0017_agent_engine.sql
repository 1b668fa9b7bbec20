-- Task runs on the one engine: every agent action (a model call, a code check, a tool
-- lookup) is a task_execution row, including those made before the run has a plan.
ALTER TABLE onebox.task_execution ALTER COLUMN plan_id DROP NOT NULL;

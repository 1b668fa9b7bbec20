-- onebox 0009: a run counts the steps of its current plan that have not succeeded yet, kept
-- in the archive transaction that holds the run's row lock, so finishing a run does not
-- rescan all of its attempts (archiving stays O(1) per step for runs of any size).
ALTER TABLE onebox.runs ADD COLUMN steps_left int;
UPDATE onebox.runs r SET steps_left = (
    SELECT jsonb_array_length(p.spec->'steps') FROM onebox.plans p WHERE p.id = r.current_plan_id
) - (
    SELECT count(DISTINCT t.step_id) FROM onebox.task_execution t
    WHERE t.run_id = r.id AND t.status = 'SUCCESS');

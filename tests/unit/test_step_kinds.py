"""The engine finds the step kinds through one mechanism (the ``onebox.step_kinds`` entry
points, or register()); the built-in kinds come through it like a third party's would."""

from __future__ import annotations

from onebox.runtime.engine import kinds


def test_the_built_in_kinds_come_from_the_entry_points() -> None:
    names = [k.name for k in kinds.kinds()]
    assert {"code", "agent", "thread_upkeep"} <= set(names)
    assert names.index("thread_upkeep") < names.index("agent") < names.index("code")


def test_each_claimed_row_goes_to_the_kind_that_owns_it() -> None:
    upkeep = {"id": 1, "step_id": "upkeep:facts",
              "details": {"action_id": "upkeep:facts", "upkeep": "facts", "turn": 1}}
    action = {"id": 2, "step_id": "s1", "details": {"action_id": "a1"}}
    code = {"id": 3, "step_id": "s1", "details": {}}
    # a replayed agent step keeps its action's details: the replay kind takes it first
    replayed = {"id": 4, "step_id": "s1", "details": {"action_id": "a1", "replay_of": "x"}}
    assert [kinds.kind_of(r).name for r in (upkeep, action, code, replayed)] == \
        ["thread_upkeep", "agent", "code", "replay"]


def test_a_registered_kind_takes_its_rows_before_the_built_in_ones() -> None:
    class Probe:
        name, priority, interruptible = "probe", 100, True

        def handles(self, row: dict) -> bool:
            return str(row.get("step_id", "")).startswith("probe:")

    kinds.register(Probe())  # type: ignore[arg-type]
    try:
        assert kinds.kind_of({"id": 4, "step_id": "probe:x", "details": {}}).name == "probe"
        assert kinds.kind_of({"id": 5, "step_id": "x", "details": {}}).name == "code"
    finally:
        kinds._kinds.pop("probe")


def test_firing_due_schedules_is_a_chore_the_worker_finds_the_same_way() -> None:
    from onebox.runtime.services.schedules import fire_due_chore

    assert kinds.chores().get("schedules") is fire_due_chore

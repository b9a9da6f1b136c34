"""Window (i)'s budget, planned from what the card measures (experiments/budget.py), and the
grid studies it runs (issue 65)."""

import json
import os

import pytest

from experiments import budget, stage
from experiments.config import StudyError, load_config, variants

PACE = {"start_seconds": 10.0, "pretrain_setup_seconds": 5.0, "pretrain_compile_seconds": 15.0,
        "pretrain_save_seconds": 5.0,
        "pretrain_step_seconds": 0.01, "finetune_compile_seconds": 20.0,
        "finetune_fixed_seconds": 3.0, "finetune_step_seconds": 0.005}
TASKS = {"sst2": 939, "stsb": 540, "mrpc": 345, "cola": 804, "rte": 234}


def plan(seconds, pace=PACE, aim=16000):
    return budget.choose(pace, seconds, aim, 2 * aim, 1000, TASKS, encoders=15, variants=3)


def test_every_plan_fits_the_time_it_was_made_for():
    """Whatever the time, the plan's cost on the card is within it; the tasks are the first
    of the study's order; below the aim only SST-2 and STS-B (or SST-2 alone) remain, and
    the notes say it was cut."""
    for seconds in range(300, 3000, 50):
        steps, tasks, notes = plan(seconds)
        assert budget.cost(PACE, steps, tasks, TASKS, 15, 3) <= seconds
        assert tasks == list(TASKS)[:len(tasks)] and steps % 1000 == 0
        if steps < 16000:
            assert len(tasks) <= 2 and ("below the aim of 16000" in notes[0] if tasks
                                        else notes[0].startswith("nothing planned"))
        else:
            assert not notes and steps <= 32000


def test_time_to_spare_takes_every_task_and_then_stops_at_the_most_steps():
    steps, tasks, _ = plan(100000)
    assert (steps, tasks) == (32000, list(TASKS))


def test_a_slower_pace_cuts_steps_first_then_tasks_never_the_first_two():
    fast = plan(1000)
    slow = plan(1000, {**PACE, "pretrain_step_seconds": 0.02})
    assert fast[0] >= 16000 and slow[0] < 16000
    assert slow[1] == ["sst2", "stsb"] and slow[0] >= 1000


def test_a_pace_too_slow_for_one_task_plans_nothing_and_says_why():
    steps, tasks, notes = plan(400, {**PACE, "finetune_step_seconds": 1.0})
    assert (steps, tasks) == (0, []) and notes[0].startswith("nothing planned")


def test_no_study_job_starts_before_a_plan_that_says_it_fits(tmp_path):
    """W1's jobs: the headline first, the calibration once it ended, each pre-training
    grid only with a plan that says run (and after the grid before it), each variant's
    fine-tuning once its grid ended."""
    spec = stage.stage_spec("W1")
    work = str(tmp_path / "work")
    pretrain, then = stage.stage_configs(spec, True, work)
    record = {"_ended": {}, "_stop": 1e10}
    jobs = {label: (command, ready) for label, command, ready in stage._jobs(
        spec, pretrain, then, True, work, str(tmp_path), record)}
    assert list(jobs) == ["benchmark", "calibrate", "pretrain bert_a", "pretrain tupe_a",
                          "pretrain bert_a_pre", "finetune bert_a", "finetune tupe_a",
                          "finetune bert_a_pre"]
    assert jobs["calibrate"][0][2:4] == ["experiments.budget", work]
    assert jobs["finetune tupe_a"][0][-3:] == ["--variants", "tupe_a_seed0", "tupe_a_seed1"]

    def ready():
        return [label for label, (_, is_ready) in jobs.items() if is_ready is None or is_ready()]
    assert ready() == ["benchmark"]
    record["_ended"]["benchmark"] = True
    assert ready() == ["benchmark", "calibrate"]
    os.makedirs(os.path.join(work, "logs"))
    for run, started in ((False, []), (True, ["pretrain bert_a"])):
        with open(budget.plan_path(work), "w") as f:
            json.dump({"plan": {"run": run}}, f)
        assert ready()[2:] == started
    record["_ended"]["pretrain bert_a"] = True
    assert ready()[2:] == ["pretrain bert_a", "pretrain tupe_a", "finetune bert_a"]


def test_a_grid_study_is_a_run_a_seed_in_the_folders_pretrain_grid_leaves(tmp_path):
    config = load_config("w1_pretrain")
    runs = variants(config)
    assert [v.name for v in runs[:3]] == ["bert_a_seed0", "bert_a_seed1", "bert_a_seed2"]
    assert runs[4].run_dir == os.path.join("runs", "study", "w1_pretrain", "tupe_a", "seed_1")
    assert {v.group for v in runs} == {"bert_a", "tupe_a", "bert_a_pre"}
    assert runs[7].overrides == {"layer_norm_position": "pre"} and runs[7].seed == 1
    path = tmp_path / "bad.json"
    raw = {k: v for k, v in config.items() if not k.startswith("_")}
    for grid, message in (({"seeds": [0, 0]}, "distinct integers"),
                          ({"seeds": [0], "rates": [1]}, "distinct integers")):
        path.write_text(json.dumps({**raw, "grid": grid}))
        with pytest.raises(StudyError, match=message):
            load_config(str(path))
    settings = {**raw["settings"], "precision": "mixed_float16"}
    path.write_text(json.dumps({**raw, "settings": settings}))
    with pytest.raises(StudyError, match="mixed_bfloat16; received shards"):
        load_config(str(path))


def test_prepare_prints_the_three_windows_and_refuses_a_first_one_that_cannot_fit():
    pace = stage.gpu_pace()
    lines = stage.programme("W1", pace, 568)
    assert "(i) W1, the GLUE study that decides T2 and T3" in lines[1]
    assert "SQuAD (" in lines[2] and "scored at [128, 256, 512, 1024]" in lines[2]
    assert "less the headline's 6 rows" in lines[3]
    with pytest.raises(StudyError, match=r"Stage W1 does not fit: even the least plan .* "
                                         r"about \d+ s of 60 s"):
        stage.programme("W1", pace, 60)


def test_a_calibration_stopped_before_it_planned_leaves_a_record_that_says_so(tmp_path):
    work = str(tmp_path)
    budget.note_unplanned(work, {"run": "calibrate", "exit": -15, "stopped": True})
    written = budget.read_plan(work)
    assert written["plan"] == {"run": False}
    assert written["notes"][0].startswith("nothing planned: the calibration was stopped at "
                                          "the window's stop before it planned")
    assert budget.note_unplanned(work, {"exit": 1, "stopped": False}) is None  # kept
    os.remove(budget.plan_path(work))
    budget.note_unplanned(work, {"run": "calibrate", "exit": None, "stopped": "not started"})
    assert "the calibration did not start before the window's stop" in budget.read_plan(
        work)["notes"][0]


def test_the_plan_rewrites_the_prepared_configs_and_a_cut_task_takes_its_settings(
        tmp_path, monkeypatch):
    """Measured figures in (the card's part stubbed), the prepared configs out: the planned
    steps and 30% checkpoint, the tasks that fit with their settings alone, and a config
    that still loads."""
    work = str(tmp_path / "work")
    stage.stage_configs(stage.stage_spec("W1"), True, work)
    measured = {**PACE, "pretrain_members": 2, "pretrain_variant": "tupe_a",
                "pretrain_tokens_per_second": 1.0, "finetune_members": 1, "finetune_task": "sst2"}
    monkeypatch.setattr(budget, "measure", lambda *args: args[3].update(measured))
    monkeypatch.setattr(budget, "task_steps", lambda config: {"sst2": 600, "stsb": 600})
    stop = __import__("time").time() + 280 / 0.85  # room for sst2, not for stsb as well
    record = budget.calibrate(work, stop, most=1)
    finetune = load_config(os.path.join(work, "finetune.json"))
    pretrain = load_config(os.path.join(work, "pretrain.json"))
    assert record["plan"]["tasks"] == finetune["tasks"] == ["sst2"]
    assert list(finetune["task_settings"]) == ["sst2"]
    assert pretrain["settings"]["steps"] == record["plan"]["steps"] == 50
    assert pretrain["settings"]["save_steps"] == [0, 15]
    assert budget.read_plan(work)["plan"]["run"] is True

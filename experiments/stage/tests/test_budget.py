"""Window (i)'s budget, planned from what the card measures (experiments/stage/budget.py), and the
grid studies it runs (issue 65)."""

import json
import os
import re

import pytest

from experiments.stage import budget, jobs, prepare, run, specs
from experiments.config import StudyError, load_config, variants
from experiments.plans import finetune_plan

PACE = {"start_seconds": 10.0, "pretrain_setup_seconds": 5.0, "pretrain_compile_seconds": 15.0,
        "pretrain_save_seconds": 5.0,
        "pretrain_step_seconds": 0.01, "finetune_compile_seconds": 20.0,
        "finetune_fixed_seconds": 3.0, "finetune_step_seconds": 0.005}
TASKS = {"sst2": 939, "stsb": 540, "mrpc": 345, "cola": 804, "rte": 234}


# W1's calibration on the H200 (records/stages/W1/check/plan.json), where the study as first
# written (15 encoders a grid each, one call) planned nothing.
RECORDED = os.path.join("docs", "results", "records", "stages", "W1", "check", "plan.json")


def plan(seconds, pace=PACE, aim=16000, second=0.0, grids=3):
    return budget.choose(pace, seconds, aim, 2 * aim, 1000, TASKS, grids, 3, second)


def check_fits(pace, seconds, second, grids=3):
    """The plan for these times, after checking that each call's part ends within it."""
    steps, tasks, first, notes = plan(seconds, pace, second=second, grids=grids)
    assert tasks == list(TASKS)[:len(tasks)] and steps % 1000 == 0 and 0 <= first <= len(tasks)
    split = budget.window_split(pace, steps, tasks, first, TASKS, 3, seconds)
    assert split["first_call_seconds"] <= seconds
    assert split["second_call_planned_seconds"] <= second
    assert split["planned_seconds"] == pytest.approx(
        split["first_call_seconds"] + split["second_call_planned_seconds"], abs=0.2)
    assert split["first_call_seconds"] == pytest.approx(
        budget.cost(PACE if pace is PACE else pace, steps, tasks[:first], TASKS, grids, 3),
        abs=0.1)
    return steps, tasks, first, notes


def test_every_plan_fits_the_time_it_was_made_for():
    """Whatever the two calls' times, the pre-training and the first call's tasks end in
    the first, the other tasks in the second; the tasks are the first of the study's order;
    below the aim only SST-2 and STS-B (or SST-2 alone) remain, and the notes say it was
    cut."""
    for second in (0, 60, 150, 400):
        for seconds in range(100, 2000, 50):
            steps, tasks, first, notes = check_fits(PACE, seconds, second)
            if not second:
                assert first == len(tasks)
            if steps < 16000:
                assert len(tasks) <= 2 and ("below the aim of 16000" in notes[0] if tasks
                                            else notes[0].startswith("nothing planned"))
            else:
                assert not notes and steps <= 32000


def test_a_second_call_takes_whole_tasks_and_buys_steps_or_tasks():
    """The same first call with a second call of 150 s: more steps or more tasks, never
    fewer; the second call's tasks are the last ones, each whole."""
    for seconds in range(200, 1500, 50):
        alone, both = plan(seconds), plan(seconds, second=150)
        assert (both[0], len(both[1])) >= (alone[0], len(alone[1])) or len(both[1]) > len(
            alone[1])
        assert both[2] <= len(both[1])
    steps, tasks, first, _ = plan(600, second=150)
    assert first < len(tasks)  # here the second call holds a task
    assert budget.finetune_cost(PACE, tasks[first:], TASKS, 3, 3, budget.second_compiled(
        PACE, 600, tasks, first)) <= 150


def test_programs_compiled_beside_the_grids_buy_steps_and_are_counted_where_they_are_not(
        monkeypatch):
    """A variant's fine-tuning programs compile beside its grid (`stage compile`): the tasks
    whose compiles end before the grids do cost no compile, so a plan holds more steps than
    with every compile counted (never fewer), and still fits; a compile that ends after
    the grids is counted."""
    pace = {**PACE, "finetune_compile_seconds": 40.0}
    begin = 10 + 5 / 3  # a process's start after the grid's first save; then 43 s a task
    assert budget.compiled_ahead(pace, begin + 43 * 2 - 0.1, 5) == 1
    assert budget.compiled_ahead(pace, begin + 43 * 2, 5) == 2
    assert budget.compiled_ahead(pace, 10, 5) == 0 and budget.compiled_ahead(pace, 1e4, 2) == 2
    ahead = {seconds: check_fits(pace, seconds, 100) for seconds in range(300, 1200, 100)}
    monkeypatch.setattr(budget, "compiled_ahead", lambda pace, seconds, count: 0)
    counted = {seconds: check_fits(pace, seconds, 100) for seconds in ahead}
    assert all((ahead[s][0], len(ahead[s][1])) >= (counted[s][0], len(counted[s][1]))
               or len(ahead[s][1]) > len(counted[s][1]) for s in ahead), (ahead, counted)
    assert any(ahead[s][0] > counted[s][0] for s in ahead), (ahead, counted)
    assert budget.finetune_cost(pace, ["sst2"], TASKS, 3, 3, 1) == pytest.approx(
        budget.finetune_cost(pace, ["sst2"], TASKS, 3, 3) - 40.0)


def test_a_task_packed_longer_than_the_calibrated_one_costs_more_a_step():
    """The calibration times its first task (SST-2, rows of 88 at W1's settings); a task
    whose rows are longer (STS-B, MRPC, RTE: 128) is costed at the calibrated step scaled
    by its length, one as short or shorter (CoLA: 56) at the calibrated step."""
    pace = {**PACE, "finetune_length": 88,
            "task_lengths": {"sst2": 88, "stsb": 128, "cola": 56}}
    assert budget.step_seconds(pace, "sst2") == budget.step_seconds(pace, "cola") == 0.005
    assert budget.step_seconds(pace, "stsb") == pytest.approx(0.005 * 128 / 88)
    assert budget.step_seconds(PACE, "stsb") == 0.005  # a record without lengths: as before
    longer = budget.finetune_cost(pace, ["stsb"], TASKS, 3, 3) - budget.finetune_cost(
        PACE, ["stsb"], TASKS, 3, 3)
    assert longer == pytest.approx(3 * 540 * 0.005 * (128 / 88 - 1))


def test_time_to_spare_takes_every_task_and_then_stops_at_the_most_steps():
    steps, tasks, first, _ = plan(100000)
    assert (steps, tasks, first) == (32000, list(TASKS), 5)


def test_a_slower_pace_cuts_steps_first_then_tasks_never_the_first_two():
    fast = plan(700)
    slow = plan(700, {**PACE, "pretrain_step_seconds": 0.02})
    assert fast[0] >= 16000 and slow[0] < 16000
    assert slow[1] == ["sst2", "stsb"] and slow[0] >= 1000


def test_a_pace_too_slow_for_one_task_plans_nothing_and_says_why():
    steps, tasks, first, notes = plan(400, {**PACE, "finetune_step_seconds": 1.0}, second=100)
    assert (steps, tasks, first) == (0, [], 0)
    assert notes[0] == ("nothing planned: at this pace not one task's fine-tuning fits with "
                        "1000 pre-training steps in 400 s and a second call's 100 s")


def test_the_recorded_calibration_that_planned_nothing_now_plans_within_both_calls():
    """The H200's pace of the record that planned nothing (15 grids a task in one call):
    with a variant's encoders as one grid, the grids at once and a second call, the plan is
    not empty and ends before each call's stop; the study as first written plans fewer
    steps and tasks at that pace."""
    recorded = json.load(open(RECORDED))
    pace, seconds = recorded["pace"], recorded["plan"]["seconds_to_plan"]
    assert recorded["plan"]["run"] is False  # what the record says
    second = specs.second_call_seconds() * 0.85
    steps, tasks, first, notes = check_fits(pace, seconds, second)
    assert steps >= 1000 and tasks[:1] == ["sst2"]
    old = plan(seconds, pace, grids=15)  # the old shape
    assert old[0] < steps and len(old[1]) < len(tasks), (old, steps, tasks)


def test_a_second_call_goes_on_from_the_first_calls_records_or_says_why_it_cannot(tmp_path):
    """A second call with the first call's plan and a record of one grid done plans the
    grids left; one whose first call planned nothing plans nothing and says so; one that
    finds no first call's work here (a fresh machine) plans nothing, starts no job and says
    why in one line."""
    work = str(tmp_path / "work")
    pretrain, then = specs.stage_configs(specs.stage_spec("W1"), True, work)
    os.makedirs(os.path.join(work, budget.FIRST_LOGS))
    first = {"pace": {**PACE, "pretrain_members": 2}, "plan": {
        "run": True, "steps": 50, "tasks": then["tasks"], "first_call_tasks": then["tasks"][:1],
        "grid_steps_a_task": dict(zip(then["tasks"], (3, 3)))}}
    with open(budget.plan_path(work, budget.FIRST_LOGS), "w") as f:
        json.dump(first, f)
    for v in variants(pretrain):  # every grid finished
        os.makedirs(os.path.join(v.run_dir, "preset"))
    done = [job for job in __import__("experiments.plans", fromlist=["x"]).finetune_plan(then)
            if job["variant"].startswith("bert_a_seed")]
    for job in done:  # bert_a's encoders did the first task
        os.makedirs(job["out"])
        with open(os.path.join(job["out"], "results.jsonl"), "w") as f:
            f.write(json.dumps({"task": then["tasks"][0], "learning_rate": 1, "seed": 0}) + "\n")
    record = budget.plan_second_call(work, __import__("time").time() + 100)
    assert record["plan"]["run"] is True
    assert record["plan"]["grids_left"] == {then["tasks"][0]: ["bert_a_pre", "tupe_a"],
                                            then["tasks"][1]: ["bert_a", "bert_a_pre", "tupe_a"]}
    assert record["lines"][0].startswith("second call: the first call's plan (50 steps, ")
    first["plan"] = {"run": False}
    with open(budget.plan_path(work, budget.FIRST_LOGS), "w") as f:
        json.dump(first, f)
    record = budget.plan_second_call(work, __import__("time").time() + 100)
    assert record["plan"]["run"] is False and record["lines"] == [
        "nothing planned: the first call planned no study job (its record: "
        "logs_call1/plan.json)"]
    gone = str(tmp_path / "gone")
    lines = run._planned_call(gone, 2)
    assert len(lines) == 1 and lines[0].startswith(
        "nothing planned: call 2 finds no first call's work here (") and "a fresh machine" in (
        lines[0])
    fresh = {"_ended": {}, "_stop": 1e10, "stage": "W1", "call": 2, "notes": lines}
    assert run._jobs(specs.stage_spec("W1"), pretrain, then, True, gone, gone, fresh) == []
    assert budget.read_plan(gone) == {**budget.read_plan(gone), "plan": {
        "run": False, "call": 2}, "lines": lines}  # no job, and the record says why
    os.remove(budget.plan_path(work))  # as the first call left it: its logs in `logs`
    os.rename(os.path.join(work, budget.FIRST_LOGS), os.path.join(work, "logs"))
    assert run._planned_call(work, 2) == []  # the first call's logs are kept aside
    assert os.listdir(os.path.join(work, budget.FIRST_LOGS)) == [budget.PLAN]
    os.makedirs(os.path.join(work, "logs"))  # a second call's, run again: theirs went home
    assert run._planned_call(work, 2) == []
    assert os.listdir(os.path.join(work, budget.FIRST_LOGS)) == [budget.PLAN]
    assert not os.path.exists(os.path.join(work, "logs"))


def test_no_study_job_starts_before_a_plan_that_says_it_fits(tmp_path, monkeypatch):
    """W1's first call: the headline first (none while its record is committed), the
    calibration once it ended (planning for a second call too, but not at the tiny size),
    the three pre-training grids at once only
    with a plan that says run, each variant's fine-tuning (its encoders as one program, the
    first call's tasks) once its grid ended. Its second call: the plan of what is left,
    then the fine-tuning of the variants whose grids finished, nothing else."""
    spec = specs.stage_spec("W1")
    work = str(tmp_path / "work")
    pretrain, then = specs.stage_configs(spec, True, work)
    record = {"_ended": {}, "_stop": 1e10, "stage": "W1"}
    committed = specs.headline_record("W1")
    assert committed == os.path.join(specs.RECORDS, "stages", "W1", "logs", "benchmark.json")
    skipped = {label for label, _, _ in run._jobs(spec, pretrain, then, True, work,
                                                     str(tmp_path), dict(record))}
    assert "benchmark" not in skipped and "calibrate" in skipped
    monkeypatch.setattr(specs, "headline_record", lambda name: None)  # as before it came home
    jobs = {label: (command, ready) for label, command, ready in run._jobs(
        spec, pretrain, then, True, work, str(tmp_path), record)}
    assert list(jobs) == ["benchmark", "calibrate", "pretrain bert_a", "pretrain tupe_a",
                          "pretrain bert_a_pre", "compile bert_a", "compile tupe_a",
                          "compile bert_a_pre", "finetune bert_a", "finetune tupe_a",
                          "finetune bert_a_pre"]
    assert jobs["compile tupe_a"][0][2:] == ["experiments.stage", "compile", then["_path"],
                                             "tupe_a_seed0", "tupe_a_seed1", "--plan-of", work]
    assert jobs["calibrate"][0][2:4] == ["experiments.stage.budget", work]
    assert jobs["calibrate"][0][jobs["calibrate"][0].index("--second") + 1] == "0"
    assert jobs["finetune tupe_a"][0][2:] == ["experiments.stage", "finetune", then["_path"],
                                              "tupe_a_seed0", "tupe_a_seed1",
                                              "--first-call-of", work]

    assert jobs["pretrain tupe_a"][0][2:] == ["experiments.stage", "pretrain",
                                              pretrain["_path"], "tupe_a", "--plan-of", work]

    def ready():
        return [label for label, (_, is_ready) in jobs.items() if is_ready is None or is_ready()]
    assert ready() == ["benchmark"]
    record["_ended"]["benchmark"] = True
    grids = [f"pretrain {g}" for g in pretrain["variants"]]
    assert ready() == ["benchmark", "calibrate", *grids]  # built beside the calibration
    os.makedirs(os.path.join(work, "logs"))
    for planned in (False, True):  # the grids train or not by the plan (`pretrain_planned`)
        with open(budget.plan_path(work), "w") as f:
            json.dump({"plan": {"run": planned}}, f)
        assert ready()[2:] == grids
        if not planned:  # a grid that ended with nothing planned: no fine-tuning follows
            record["_ended"]["pretrain tupe_a"] = True
            assert "finetune tupe_a" not in ready()
            del record["_ended"]["pretrain tupe_a"]
    # A variant's compile once its grid wrote its first encoder (seed 0's initialization).
    [init] = [job["init"] for job in finetune_plan(then, ["tupe_a_seed0"])
              if job["step"] == 0]
    os.makedirs(init)
    assert ready()[-1] == "compile tupe_a" and "compile bert_a" not in ready()
    record["_ended"]["pretrain tupe_a"] = True
    assert "finetune tupe_a" not in ready()  # at --tiny, once its compile ended too
    record["_ended"]["compile tupe_a"] = True
    assert ready()[-1] == "finetune tupe_a" and "finetune bert_a" not in ready()

    second = {"_ended": {}, "_stop": 1e10, "stage": "W1", "call": 2, "notes": []}
    with open(budget.plan_path(work), "w") as f:
        json.dump({"pace": PACE, "plan": {"run": True, "steps": 50, "tasks": then["tasks"],
                                          "grid_steps_a_task": dict.fromkeys(then["tasks"], 3)}},
                  f)
    os.rename(os.path.join(work, "logs"), os.path.join(work, budget.FIRST_LOGS))
    for v in variants(pretrain):
        if v.group != "bert_a_pre":  # its grid stopped in the first call
            os.makedirs(os.path.join(v.run_dir, "preset"))
    jobs = run._jobs(spec, pretrain, then, True, work, str(tmp_path), second)
    assert [label for label, _, _ in jobs] == ["finetune bert_a", "finetune tupe_a"]
    assert "--first-call-of" not in jobs[0][1]
    assert budget.read_plan(work)["plan"]["call"] == 2  # written before any job


def test_a_planned_grid_is_built_and_compiled_before_the_plan_then_trains_its_steps(
        tmp_path, monkeypatch):
    """`stage pretrain` (`jobs.pretrain_planned`; the library's grid stubbed): it builds the
    grid and compiles its program before it reads the plan, then trains that grid
    (`pretrain_grid(pretrainer=...)`) at the plan's config, whose steps the run folders'
    settings and records pin, not the aim's; a plan that says nothing trains nothing and
    records nothing."""
    import keras_tupe.pretraining
    from experiments import records

    work = str(tmp_path / "work")
    pretrain, _ = specs.stage_configs(specs.stage_spec("W1"), True, work)
    raw = records.read_json(pretrain["_path"])
    records.write_json(pretrain["_path"], {**raw, "settings": {
        **raw["settings"], "steps": 20, "save_steps": [0, 6]}})  # as the calibration plans
    dispatch, events, plans = pretrain["grid"]["steps_per_dispatch"], [], []

    class Pretrainer:
        def compile(self, steps):
            events.append(("compiled", steps))

    def build(config, members, steps_per_dispatch):
        events.append(("built", config.steps, [seed for seed, _ in members]))
        return Pretrainer()

    def grid(config, seeds, steps_per_dispatch, pretrainer, backups):
        assert not backups
        events.append(("trained", config.steps, type(pretrainer).__name__))
        for seed in seeds:
            os.makedirs(os.path.join(config.out, f"seed_{seed}"))
            open(os.path.join(config.out, f"seed_{seed}", "vocab.txt"), "w").write("[PAD]\n")
    monkeypatch.setattr(keras_tupe.pretraining, "grid_pretrainer", build)
    monkeypatch.setattr(keras_tupe.pretraining, "pretrain_grid", grid)
    monkeypatch.setattr(jobs, "ensure_vocabulary", lambda config, command: None)
    monkeypatch.setattr(budget, "read_plan", lambda work: events.append(("plan",)) or plans[0])
    plans.append({"plan": {"run": True, "steps": 20}})
    jobs.pretrain_planned(pretrain, "tupe_a", work, "test")
    assert events == [("built", pretrain["settings"]["steps"], [0, 1]),
                      ("compiled", dispatch), ("plan",), ("trained", 20, "Pretrainer")]
    for v in (v for v in variants(pretrain) if v.group == "tupe_a"):
        pinned = records.read_json(os.path.join(v.run_dir, records.RUN_RECORD))
        assert pinned["config"]["steps"] == 20 and pinned["config"]["save_steps"] == [0, 6]
    events.clear()
    plans[0] = {"plan": {"run": False}}
    jobs.pretrain_planned(pretrain, "bert_a", work, "test")
    assert [event[0] for event in events] == ["built", "compiled", "plan"]  # nothing trained
    assert not any(os.path.exists(v.run_dir) for v in variants(pretrain) if v.group == "bert_a")


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


def test_a_squad_study_trains_as_a_grid_only_on_one_article_split(tmp_path):
    """S6's SQuAD trains an encoder's runs as one program a round; a grid cuts one article
    split for all its members, so a grid study without `split_seed` is refused."""
    config = load_config("squad_long")
    assert config["grid"] == {"precision": "mixed_bfloat16", "steps_per_dispatch": 100}
    assert "grid" not in load_config("squad_relative")  # recorded run by run
    raw = {k: v for k, v in config.items() if not k.startswith("_")}
    settings = {k: v for k, v in raw["settings"].items() if k != "split_seed"}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**raw, "settings": settings}))
    with pytest.raises(StudyError, match="for SQuAD with `settings.split_seed`"):
        load_config(str(path))
    path.write_text(json.dumps({**raw, "settings": settings, "grid": None}))
    assert load_config(str(path))["settings"] == settings  # run by run: a split a seed


def test_s6s_squad_is_costed_as_its_most_grid_rounds_at_w1s_fine_tuning_pace():
    """Three rounds an encoder (every rate x seed, an edge rate, its other seeds), each a
    compile, the host work and the steps at the recorded 9-member step; one round without a
    selection seed; a grid of another size at the pre-training grid's token rate if slower."""
    pace, _ = specs.w1_pace()
    config = load_config("squad_long")
    assert (len(config["learning_rates"]) * len(config["seeds"]), pace["finetune_members"]) == (
        9, 9)
    a_round = 40.61603357599999 + 7.2536827440000025 + 1000 * 0.01720850736666667
    assert prepare.squad_grid_seconds(config, 1000)[0] == pytest.approx(3 * a_round)
    single = {**config, "selection_seed": None}
    assert prepare.squad_grid_seconds(single, 1000)[0] == pytest.approx(a_round)
    wide = {**single, "seeds": list(range(30))}  # 90 members: 368,640 tokens a step
    step = 90 * 32 * 128 / 4980208.077890105
    assert step > 0.01720850736666667
    assert prepare.squad_grid_seconds(wide, 1000)[0] == pytest.approx(
        40.61603357599999 + 7.2536827440000025 + 1000 * step)


def test_prepare_prints_the_three_windows_and_refuses_a_first_one_that_cannot_fit():
    """Window (i) at the recorded pace, planned as the card plans, by call, with its basis;
    refused, with the figures, at a pace where not even the least plan fits."""
    pace = specs.gpu_pace()
    lines = prepare.programme("W1", pace, 568)
    assert "(i) W1, the GLUE study that decides T2 and T3" in lines[1]
    assert re.search(r"Call 1 \(timeout_s 600; 568 s for its jobs\): .* the calibration, about "
                     r"\d+ s; then, at the recorded pace, \d+ pre-training steps .* Call 2 "
                     r"\(timeout_s about 165: .*basis: W1's calibration record \(docs/results/"
                     r"records/stages/W1/check/plan.json", lines[1]), lines[1]
    assert "scored at [128, 256, 512, 1024]" in lines[2]
    # S6's SQuAD as a grid an encoder, at W1's fine-tuning grid: 9 members, 3 rounds at most.
    assert re.search(r"S6 4 encoders pre-trained, then SQuAD as a grid an encoder \(9 members, "
                     r"\d+ steps; up to 3 rounds of \d+ s: a 17.2 ms step, a compile of 41 s", lines[2])
    assert "less the headline's 6 rows" in lines[3]
    slow = {**specs.w1_pace()[0], "finetune_step_seconds": 1.0}
    with pytest.raises(StudyError, match=r"Stage W1 does not fit: even the least plan \(the "
                                         r"first task after 1000 pre-training steps\) does not "
                                         r"fit window \(i\)'s two calls .*basis: "):
        prepare.window_one("W1", 568, slow)


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
    specs.stage_configs(specs.stage_spec("W1"), True, work)
    measured = {**PACE, "pretrain_members": 2, "pretrain_variant": "tupe_a",
                "pretrain_tokens_per_second": 1.0, "finetune_members": 5,
                "finetune_encoders": 5, "finetune_task": "sst2", "finetune_length": 88,
                "task_lengths": {"sst2": 88, "stsb": 88}}
    monkeypatch.setattr(budget, "measure", lambda *args: args[3].update(measured))
    monkeypatch.setattr(budget, "task_steps", lambda config: {"sst2": 600, "stsb": 600})
    # The grids (6.5 s once planned: built beside the calibration) and sst2 (42 s) fit 70 s;
    # stsb (32 s more) does not.
    stop = __import__("time").time() + 70 / 0.85
    record = budget.calibrate(work, stop, most=1)
    finetune = load_config(os.path.join(work, "finetune.json"))
    pretrain = load_config(os.path.join(work, "pretrain.json"))
    assert record["plan"]["tasks"] == finetune["tasks"] == ["sst2"]
    assert record["plan"]["first_call_tasks"] == ["sst2"]  # no second call planned for
    assert list(finetune["task_settings"]) == ["sst2"]
    assert pretrain["settings"]["steps"] == record["plan"]["steps"] == 50
    assert pretrain["settings"]["save_steps"] == [0, 15]
    assert budget.read_plan(work)["plan"]["run"] is True

"""A planned window's budget, from what the card measures in its first minute (issue 65).

    python -m experiments.stage.budget WORK --stop EPOCH [--second S] [--margin 0.15] [--most 2]

On the lent machine, before any study job of stage W1 starts: times the pre-training grid
(`pretrain_grid`'s trainer: the study's K seeds, its batch, TUPE-A, the costliest variant)
and the fine-tuning grid as the window runs it (the first task's rates x seeds of the
largest variant's encoders as one program, copies of that trainer's model), each with its
compile; then sets the budget from those figures and the time the window has
left: this call's, until `--stop`, and `--second` seconds of jobs in a second call on the
same warm machine (the run folders live outside the carried folder, so they are still
there). The plan is the pre-training steps and how many of the study's tasks (in its
order) fit with a margin (`cost`: the variants' grids at once, then their fine-tuning at
once); the pre-training must end in this call, since a grid does not resume. Each figure
is written to `WORK/logs/measured.json` as it is measured (`Figures`), so a calibration
stopped by the deadline still sends home what it measured. It rewrites
the prepared configs (`WORK/pretrain.json`, `WORK/finetune.json`) to the plan and writes
`WORK/logs/plan.json` (the figures, the plan by call, its basis); a pace too slow for the
aim cuts the budget and says so there, and one too slow for anything plans nothing
(`"run": false`): the stage starts no study job then.

The second call plans no steps: `plan_second_call` counts the runs the first call's plan
left (from the records), sets them against this call's time at the first call's pace, and
says in one line when the first call's run folders are not there (a fresh machine).
"""

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
import tempfile
import time

from experiments import config as study_config
from experiments import records
from experiments.plans import finetune_plan
from keras_tupe_base.settings import FinetuneConfig

START = time.time()  # before the heavy imports: a process's start is part of each job's cost
PLAN = "plan.json"
MEASURED = "measured.json"  # the calibration's figures, each written as it is measured
FIRST_LOGS = "logs_call1"  # the first call's logs, kept beside the second call's `logs`


def plan_path(work, logs="logs"):
    return os.path.join(work, logs, PLAN)


def read_plan(work, logs="logs"):
    """The plan the calibration (or a second call) wrote, or None before it."""
    path = plan_path(work, logs)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


class Figures(dict):
    """The calibration's figures (`measure` fills them), written to `path` whole at each
    `[]=` and `update` (`WORK/logs/measured.json`, among the records the stage streams
    home), so a calibration stopped by the deadline has sent home what it measured."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self._write()

    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        self._write()

    def _write(self):
        records.write_json(self.path, {"pace": dict(self), "written": records.now()})


def quantum(settings, dispatch):
    """Steps a planned budget is a multiple of: `eval_every` divides it, and it and its 30%
    checkpoint are whole dispatches (a shorter last dispatch would compile again)."""
    return math.lcm(settings["eval_every"], 10 * dispatch)


def train_cap(config, task):
    """The train examples a task of `config` is cut to (`task_settings`), or None."""
    return (config.get("task_settings") or {}).get(task, {}).get("max_train_examples")


def task_steps(finetune):
    """`{task: grid steps}` of the study's fine-tuning, from the prepared GLUE files."""
    from keras_tupe.data.glue import get_task

    steps = {}
    for task in map(get_task, finetune["tasks"]):
        with open(os.path.join(finetune["data_dir"], task.directory,
                               task.split_files["train"]), encoding="utf-8") as f:
            examples = min(sum(1 for _ in f) - 1, train_cap(finetune, task.name) or math.inf)
        steps[task.name] = finetune["settings"]["epochs"] * -(
            -examples // finetune["settings"]["batch_size"])
    return steps


def encoders_a_grid(pretrain, finetune):
    """`{variant: encoders}`: the encoders of each pre-training variant (its seeds' final
    models and the checkpoints the study names) that the window fine-tunes as one program."""
    group = {v.name: v.group for v in study_config.variants(pretrain)}
    counts = {}
    for job in finetune_plan(finetune):
        counts[group[job["variant"]]] = counts.get(group[job["variant"]], 0) + 1
    return counts


# === the cost model (its arithmetic: experiments/README.md, "Window (i)") ===

def pretrain_cost(pace, steps, variants):
    """Seconds the variants' pre-training grids take once the plan is written: their saves
    (host work, which overlaps between the processes), then every grid's steps one after
    the other (the card runs one process's kernels at a time, so steps of grids at once
    add up). Their start, set-up and compile are not counted: the grids start with the
    calibration (`stage pretrain`), which does the same and more before it plans."""
    return pace["pretrain_save_seconds"] + variants * steps * pace["pretrain_step_seconds"]


def finetune_cost(pace, tasks, steps_a_task, grids, processes, compiled=0):
    """Seconds the fine-tuning on `tasks` takes: `grids` programs a task (a variant's
    encoders as one, timed at the largest), in `processes` at once (one a variant): a
    process's start, then a task at a time its compile (the processes compile at once;
    none for the first `compiled` tasks, compiled ahead: `compiled_ahead`) and a grid's
    host work before the card has any, then the larger of every grid's steps one after the
    other and the grids' host work shared out."""
    fixed = pace["finetune_fixed_seconds"]
    return pace["start_seconds"] + sum(
        (pace["finetune_compile_seconds"] if index >= compiled else 0.0) + fixed + max(
            grids * steps_a_task[task] * step_seconds(pace, task),
            grids * fixed / processes) for index, task in enumerate(tasks))


def step_seconds(pace, task):
    """A fine-tuning grid step of `task`: the calibration's (its first task's), scaled by
    the task's packed train length against the calibrated one where it is longer (a step's
    work grows with its tokens: STS-B's rows of 128 against SST-2's 88)."""
    longer = (pace.get("task_lengths") or {}).get(task, 0) / pace.get("finetune_length", math.inf)
    return pace["finetune_step_seconds"] * max(1.0, longer)


def compiled_ahead(pace, seconds, count):
    """How many of a plan's first `count` tasks have their fine-tuning programs in the
    compilation cache `seconds` after the plan: each variant's compile job (`stage
    compile`, beside its grid, on the host) starts once the grid has written its
    initialization (a process's start after the grid's first saves), then compiles a task
    at a time (its compile and a grid's host work)."""
    begin = pace["start_seconds"] + pace["pretrain_save_seconds"] / 3
    each = pace["finetune_compile_seconds"] + pace["finetune_fixed_seconds"]
    return max(0, min(count, int((seconds - begin) // each)))


def cost(pace, steps, tasks, steps_a_task, grids, variants):
    """Seconds the whole plan takes on the card in one call: the grids at once (the
    fine-tuning programs compiled beside them), then the fine-tuning, a process a variant."""
    pretraining = pretrain_cost(pace, steps, variants)
    return pretraining + (finetune_cost(
        pace, tasks, steps_a_task, grids, variants,
        compiled_ahead(pace, pretraining, len(tasks))) if tasks else 0.0)


def second_compiled(pace, seconds, tasks, first):
    """How many of the second call's tasks (`tasks[first:]`) the first call's compile jobs
    compiled, ending within its `seconds`."""
    return max(0, compiled_ahead(pace, seconds, len(tasks)) - first)


def choose(pace, seconds, aim, most, step_quantum, steps_a_task, grids, variants,
           second=0.0):
    """The plan: `(steps, tasks, first, notes)`: the pre-training steps, the tasks, how
    many of them the first call fine-tunes (the rest: the second, a task whole in one call,
    since a grid stopped at a call's end is lost). `seconds`: this call's time to plan,
    `second`: a second call's (both less the margin). The pre-training and the first
    call's tasks end within `seconds`, the other tasks within `second`. The most tasks (in
    the study's order) with which the pre-training reaches `aim` steps, its steps then up
    to `most`; if none reaches it, the first two tasks (or the first) with as many steps
    as fit (cut, said in the notes); steps 0 and no tasks if not one task fits with one
    `step_quantum`."""
    tasks = list(steps_a_task)
    per_step = variants * pace["pretrain_step_seconds"]

    def steps_that_fit(count):
        """`(steps, first)`: the most steps with `count` tasks, and the first call's."""
        best = (-1, count)
        for first in range(count, -1, -1):  # the most tasks in the first call, then fewer
            if first < count and finetune_cost(
                    pace, tasks[first:count], steps_a_task, grids, variants,
                    second_compiled(pace, seconds, tasks[:count], first)) > second:
                continue
            def more(steps):  # the quanta of steps that fit beside `steps` more
                left = seconds - cost(pace, steps, tasks[:first], steps_a_task, grids, variants)
                return int(left / per_step) // step_quantum * step_quantum

            found = more(0)
            while found > 0 and (extra := more(found)) > 0:  # longer grids hide more
                found += extra  # compiles (`compiled_ahead`): steps until none is bought
            best = max(best, (found, first), key=lambda pair: pair[0])
        return max(best[0], 0), best[1]

    for count in range(len(tasks), 0, -1):
        steps, first = steps_that_fit(count)
        if steps >= aim:
            return min(steps, most), tasks[:count], first, []
    for count in range(min(2, len(tasks)), 0, -1):
        steps, first = steps_that_fit(count)
        if steps >= step_quantum:
            return steps, tasks[:count], first, [
                f"cut: at this pace the window holds {steps} pre-training steps with "
                f"{', '.join(tasks[:count])}, below the aim of {aim}"]
    return 0, [], 0, [f"nothing planned: at this pace not one task's fine-tuning fits with "
                      f"{step_quantum} pre-training steps in {seconds:.0f} s"
                      + (f" and a second call's {second:.0f} s" if second else "")]


# === the calibration (there) ===

def note_unplanned(work, calibration):
    """After the window: where the calibration left no plan (stopped at the deadline, or
    failed: `calibration`, its process record), a plan record that says so; else None."""
    if read_plan(work) is not None:
        return None
    how = {"not started": "did not start before the window's stop",
           True: "was stopped at the window's stop"}.get(
        calibration.get("stopped"), f"exited {calibration.get('exit')}")
    note = (f"nothing planned: the calibration {how} before it planned (its log: "
            f"logs/calibrate.log; {measured_note(work)}); no study job started")
    return records.write_json(plan_path(work), {"plan": {"run": False}, "notes": [note],
                                                "lines": [note], "written": records.now()})


def measured_note(work):
    """Which figures a calibration measured before it stopped (`Figures`), in words."""
    path = os.path.join(work, "logs", MEASURED)
    if not os.path.exists(path):
        return "it measured nothing"
    with open(path) as f:
        figures = json.load(f)["pace"]
    return f"what it measured: logs/{MEASURED}, {', '.join(figures) or 'nothing'}"


def measure(pretrain, finetune, scratch, pace):
    """The card's figures into `pace` as they come: a pre-training grid step of TUPE-A at
    the study's K and batch, and a fine-tuning grid step at the study's rates x seeds on its
    first task, each with its compile and what a run pays besides its steps (loading,
    packing, the dev split's prediction)."""
    from keras_tupe.finetuning.glue import finetune_glue_grid, packed_lengths
    from keras_tupe.pretraining import grid_pretrainer, write_preset

    pace["start_seconds"] = time.time() - START
    grid = pretrain["grid"]
    dispatch = grid.get("steps_per_dispatch", 100)
    every = study_config.variants(pretrain)
    chosen = [v for v in every if v.variant == "tupe_a"] or every
    seeds = [v for v in chosen if v.group == chosen[0].group]
    config = dataclasses.replace(study_config.pretrain_config(pretrain, seeds[0]),
                                 steps=3 * dispatch, save_steps=[], eval_every=dispatch)
    begun = time.perf_counter()
    built = grid_pretrainer(config, [(v.seed, config.learning_rate) for v in seeds], dispatch)
    # The masks are drawn on the host while the device trains (`pretrain`'s grid): timed
    # apart from the steps.
    inputs = built.inputs(0, dispatch), built.inputs(dispatch, 3 * dispatch)
    first = time.perf_counter()
    built.fit(inputs[0])  # compiles
    second = time.perf_counter()
    built.fit(inputs[1])
    step = (time.perf_counter() - second) / (2 * dispatch)
    pace.update(pretrain_members=len(seeds), pretrain_variant=seeds[0].group,
                pretrain_setup_seconds=first - begun, pretrain_step_seconds=step,
                pretrain_compile_seconds=max(0.0, second - first - dispatch * step),
                pretrain_tokens_per_second=len(seeds) * config.batch_size * config.seq_len / step)
    init = os.path.join(scratch, "init")
    begun = time.perf_counter()
    write_preset(built.trainer.member_model(0), config.vocab, config, init)
    # a run saves each seed at step 0, at 30% and at its end
    pace["pretrain_save_seconds"] = 3 * len(seeds) * (time.perf_counter() - begun)

    task, settings = finetune["tasks"][0], finetune["settings"]
    # The largest variant's encoders as one program (`stage.finetune_together`): copies of
    # this initialization, each loaded as its own encoder.
    encoders = max(encoders_a_grid(pretrain, finetune).values())
    inits = [init] + [shutil.copytree(init, f"{init}_{index}") for index in range(1, encoders)]
    members = [(rate, seed, start) for start in inits for rate in finetune["learning_rates"]
               for seed in finetune["seeds"]]
    run = FinetuneConfig(task=task, init=init, data_dir=finetune["data_dir"], vocab=config.vocab,
                         lowercase=pretrain["vocabulary"]["lowercase"], **{
                             **settings, "epochs": 1,
                             "max_train_examples": 3 * dispatch * settings["batch_size"]})
    timed = []
    # Twice the same run: the first compiles, the second finds the compilation cache. The
    # training set's size is compiled in (the schedule is an input: `keras_tupe.grid`), so
    # a run on another number of examples compiles again.
    for _ in range(2):
        begun = time.perf_counter()
        rows = finetune_glue_grid(run, [r for r, _, _ in members], [s for _, s, _ in members],
                                  **dict(finetune.get("grid") or {}),
                                  inits=[start for _, _, start in members])
        timed.append((time.perf_counter() - begun, rows[0]["train_seconds"]))
    (cold, _), (warm, training) = timed
    steps = rows[0]["epochs"] * -(-rows[0]["train_examples"] // settings["batch_size"])
    # Each task's packed train length as its run packs it: a longer one's step costs more.
    lengths = {name: packed_lengths(dataclasses.replace(run, task=name, **{
        "max_train_examples": None, **settings,
        **(finetune.get("task_settings") or {}).get(name, {})}))["train"]
        for name in finetune["tasks"]}
    pace.update(finetune_members=len(members), finetune_encoders=encoders, finetune_task=task,
                finetune_length=rows[0]["sequence_lengths"]["train"], task_lengths=lengths,
                finetune_step_seconds=training / steps,  # a cache load counted in
                finetune_fixed_seconds=warm - training,
                finetune_compile_seconds=max(0.0, cold - warm))
    return pace


def calibrate(work, stop, margin=0.15, most=2.0, second=0.0):
    """Measures (`measure`), plans (`choose`) for the time left before `stop` (epoch
    seconds) and `second` seconds of a second call, each less `margin` of it, rewrites the
    prepared configs to the plan and writes the plan record; returns it."""
    paths = {kind: os.path.join(work, f"{kind}.json") for kind in ("pretrain", "finetune")}
    pretrain, finetune = (study_config.load_config(paths[kind])
                          for kind in ("pretrain", "finetune"))
    pace = Figures(os.path.join(work, "logs", MEASURED))  # streamed home as measured
    try:
        with tempfile.TemporaryDirectory() as scratch:
            measure(pretrain, finetune, scratch, pace)
    except Exception as error:  # the grids waiting for a plan (`stage pretrain`) end now
        note = (f"nothing planned: the calibration failed before it planned "
                f"({type(error).__name__}: {error}; {measured_note(work)}); no study job "
                "trained")
        records.write_json(plan_path(work), {"plan": {"run": False}, "notes": [note],
                                             "lines": [note], "written": records.now()})
        raise
    left = stop - time.time()
    seconds, second_seconds = left * (1 - margin), second * (1 - margin)
    dispatch = pretrain["grid"].get("steps_per_dispatch", 100)
    aim, settings = pretrain["settings"]["steps"], pretrain["settings"]
    step_quantum = quantum(settings, dispatch)
    steps_a_task = task_steps(finetune)
    encoders, groups = len(finetune_plan(finetune)), len(pretrain["variants"])
    steps, tasks, first, notes = choose(
        pace, seconds, aim, max(aim, int(aim * most) // step_quantum * step_quantum),
        step_quantum, steps_a_task, groups, groups, second_seconds)
    plan = {"run": bool(tasks), "steps": steps, "save_steps": [0, round(0.3 * steps)],
            "tasks": tasks, "first_call_tasks": tasks[:first], "aim_steps": aim,
            "margin": margin, **window_split(pace, steps, tasks, first, steps_a_task, groups,
                                             seconds),
            "seconds_to_plan": round(seconds, 1), "second_call_seconds": round(
                second_seconds, 1), "encoders_fine_tuned": encoders,
            "grid_steps_a_task": steps_a_task}
    lines = [calibration_line(pace, settings),
             *plan_lines(plan, settings, groups, left, second), *notes]
    record = {"pace": dict(pace), "plan": plan, "notes": notes, "lines": lines,
              "basis": "this window's calibration (experiments/stage/budget.py): TUPE-A's grid "
                       "pace applied to every variant, the first task's to every task",
              "card": records.machine(), "written": records.now()}
    if plan["run"]:  # the configs first: a plan record means they are the plan's
        kept = {task: value for task, value in (finetune.get("task_settings") or {}).items()
                if task in tasks}  # a cut task's settings go with it
        for kind, update in (("pretrain", {"settings": {**pretrain["settings"], "steps": steps,
                                                        "save_steps": plan["save_steps"]}}),
                             ("finetune", {"tasks": tasks, "task_settings": kept})):
            with open(paths[kind]) as f:
                raw = json.load(f)
            records.write_json(paths[kind], {**raw, **update})
    records.write_json(plan_path(work), record)
    print(*lines, sep="\n", flush=True)
    return record


def window_split(pace, steps, tasks, first, steps_a_task, variants, seconds):
    """A plan's seconds by part and by call (`first`: the first call's tasks; `seconds`:
    the first call's, from the grids' start): the grids (a variant's a process), the first
    call's fine-tuning and the second's, and how many of each call's tasks were compiled
    ahead (`compiled_ahead`)."""
    pretraining = pretrain_cost(pace, steps, variants)
    compiled = [compiled_ahead(pace, pretraining, first),
                second_compiled(pace, seconds, tasks, first)]
    here, there = (finetune_cost(pace, part, steps_a_task, variants, variants, ahead)
                   if part else 0.0
                   for part, ahead in zip((tasks[:first], tasks[first:]), compiled))
    return {"pretrain_seconds": round(pretraining, 1), "finetune_seconds": round(here + there, 1),
            "planned_seconds": round(pretraining + here + there, 1),
            "first_call_seconds": round(pretraining + here, 1),
            "second_call_planned_seconds": round(there, 1),
            "compiled_ahead": compiled}


def calibration_line(pace, settings):
    return (f"calibration: pre-training {pace['pretrain_members']} {pace['pretrain_variant']} "
            f"seeds at batch {settings['batch_size']} x {settings['seq_len']}: "
            f"{pace['pretrain_step_seconds'] * 1000:.1f} ms a grid step "
            f"({pace['pretrain_tokens_per_second'] / 1e6:.2f}M tokens/s), compile "
            f"{pace['pretrain_compile_seconds']:.1f} s; fine-tuning {pace['finetune_task']} "
            f"{pace['finetune_members']} members: {pace['finetune_step_seconds'] * 1000:.1f} ms "
            f"({pace['finetune_encoders']} encoders, rows of {pace['finetune_length']}; a "
            f"longer task's step scaled to its rows: {pace['task_lengths']}) a grid step, compile "
            f"{pace['finetune_compile_seconds']:.1f} s, the rest of a run "
            f"{pace['finetune_fixed_seconds']:.1f} s; a process starts in "
            f"{pace['start_seconds']:.1f} s")


def plan_lines(plan, settings, variants, left, second):
    """What a plan runs in each call, in words (`left`, `second`: the two calls' seconds
    before the margin)."""
    if not plan["run"]:
        return [f"plan: none in the {left:.0f} s left" + (
            f" and a second call's {second:.0f} s" if second else "")
            + f", less a {plan['margin']:.0%} margin"]
    tokens = plan["steps"] * settings["batch_size"] * settings["seq_len"]
    return [f"plan: {plan['steps']} pre-training steps ({tokens / 1e6:.1f}M tokens an "
            f"encoder, {tokens / 65.5e6:.2f}x S1's 65.5M; aim {plan['aim_steps']}), the "
            f"{variants} variants' grids at once: about {plan['pretrain_seconds']:.0f} s; "
            f"then {plan['encoders_fine_tuned']} encoders on {', '.join(plan['tasks'])}, a "
            f"variant's encoders as one program a task, a process a variant: about "
            f"{plan['finetune_seconds']:.0f} s",
            f"by call: this one the grids and "
            f"{', '.join(plan['first_call_tasks']) or 'no fine-tuning'}, about "
            f"{plan['first_call_seconds']:.0f} s of its {plan['seconds_to_plan']:.0f} s" + (
                f"; the second (on this warm machine, with the run folders) "
                f"{', '.join(plan['tasks'][len(plan['first_call_tasks']):])}, about "
                f"{plan['second_call_planned_seconds']:.0f} s of its "
                f"{plan['second_call_seconds']:.0f} s" if plan["second_call_planned_seconds"]
                else "; no second call needed") + f" (each less a {plan['margin']:.0%} margin)"]


# === a second call on the same machine ===

def plan_second_call(work, stop, margin=0.15):
    """The second call's plan record (`WORK/logs/plan.json`): the fine-tuning runs the
    first call's plan (`WORK/logs_call1/plan.json`) left, from the records, against this
    call's time at the first call's pace; nothing where that plan ran nothing. Returns it."""
    first = read_plan(work, FIRST_LOGS)
    seconds = (stop - time.time()) * (1 - margin)
    if not (first or {}).get("plan", {}).get("run"):
        note = ("nothing planned: the first call planned no study job (its record: "
                f"{FIRST_LOGS}/plan.json)")
        return write_second(work, {"run": False, "call": 2}, [note], first)
    pretrain, finetune = (study_config.load_config(os.path.join(work, f"{kind}.json"))
                          for kind in ("pretrain", "finetune"))
    every = study_config.variants(pretrain)
    group = {v.name: v.group for v in every}
    trained = set(group.values()) - {v.group for v in every if not v.is_finished}
    members = len(finetune["learning_rates"]) * len(finetune["seeds"])
    left, waiting = {task: set() for task in finetune["tasks"]}, []  # the variants to run
    for job in finetune_plan(finetune):
        rows = records.read_jsonl(os.path.join(job["out"], "results.jsonl"))
        for task in finetune["tasks"]:
            if sum(row["task"] == task for row in rows) < members:
                if group[job["variant"]] in trained:
                    left[task].add(group[job["variant"]])
                else:
                    waiting.append(f"{job['variant']} step {job['step']} {task}")
    pace, steps_a_task = first["pace"], first["plan"]["grid_steps_a_task"]
    tasks = [task for task in left if left[task]]
    compiled = (first["plan"].get("compiled_ahead") or [0, 0])[1]  # as the first call planned
    needed = finetune_cost(pace, tasks, steps_a_task, max(map(len, left.values())),
                           len(pretrain["variants"]), compiled) if tasks else 0.0
    grids = sum(map(len, left.values()))
    lines = [f"second call: the first call's plan ({first['plan']['steps']} steps, "
             f"{', '.join(first['plan']['tasks'])}) left {grids} grids (a variant's encoders "
             "on a task): " + (", ".join(f"{task} {sorted(left[task])}" for task in tasks)
                               + f", about {needed:.0f} s of the {seconds:.0f} s left less a "
                               f"{margin:.0%} margin, at the first call's pace" if tasks else
                               "nothing to do")
             + ("" if needed <= seconds else "; what does not end by the stop is not recorded")]
    if waiting:
        lines.append(f"not run: their pre-training did not finish in the first call: "
                     f"{', '.join(waiting)}")
    return write_second(work, {"run": bool(tasks), "call": 2, "grids_left": {
        task: sorted(names) for task, names in left.items()},
                                "seconds_to_plan": round(seconds, 1),
                                "planned_seconds": round(needed, 1)}, lines, first)


def write_second(work, plan, lines, first):
    """A second call's plan record, `plan` with its `lines` (`first`: the first call's
    plan record it goes on from, or None)."""
    record = {"plan": plan, "lines": lines, "notes": lines,
              "basis": "the first call's calibration in this window "
                       f"({FIRST_LOGS}/plan.json)" if first else "none: no first call here",
              "written": records.now()}
    records.write_json(plan_path(work), record)
    print(*lines, sep="\n", flush=True)
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.stage.budget", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work", help="the stage's work folder (pretrain.json, finetune.json)")
    parser.add_argument("--stop", type=float, required=True, help="epoch seconds: the stop")
    parser.add_argument("--second", type=float, default=0.0,
                        help="seconds of jobs a second call on this machine gives")
    parser.add_argument("--margin", type=float, default=0.15)
    parser.add_argument("--most", type=float, default=2.0,
                        help="the most steps, as a multiple of the study's aim")
    args = parser.parse_args(argv)
    calibrate(args.work, args.stop, args.margin, args.most, args.second)
    return 0


if __name__ == "__main__":
    sys.exit(main())

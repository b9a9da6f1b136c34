"""A planned window's budget, from what the card measures in its first minute (issue 65).

    python -m experiments.budget WORK --stop EPOCH [--margin 0.15] [--most 2]   # there

On the lent machine, before any study job of stage W1 starts: times the pre-training grid
(`pretrain_grid`'s trainer: the study's K seeds, its batch, TUPE-A, the costliest variant)
and the fine-tuning grid (the first task's K rates x seeds, from that trainer's model),
each with its compile; then sets the budget from those figures and the time left before
`--stop`: the pre-training steps and how many of the study's tasks (in its order) fit with
a margin, every job counted as if alone on the card. It rewrites the prepared configs
(`WORK/pretrain.json`, `WORK/finetune.json`) to the plan and writes `WORK/logs/plan.json`
(the figures, the plan, its basis); a pace too slow for the aim cuts the budget and says
so there, and one too slow for anything plans nothing (`"run": false`): the stage starts
no study job then.
"""

import argparse
import json
import math
import os
import sys
import time

START = time.time()  # before the heavy imports: a process's start is part of each job's cost
PLAN = "plan.json"
# Jobs a window starts after the calibration: one pre-training grid and one fine-tuning
# process a variant (`stage._planned_jobs`).
PROCESSES_A_VARIANT = 2


def plan_path(work):
    return os.path.join(work, "logs", PLAN)


def read_plan(work):
    """The plan the calibration wrote, or None before it."""
    path = plan_path(work)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


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


def choose(pace, seconds, aim, most, step_quantum, steps_a_task, encoders, variants):
    """The plan: `(steps, tasks, notes)`. The most tasks (in the study's order) with which
    the pre-training reaches `aim` steps, its steps then up to `most`; if none reaches it,
    the first tasks with as many steps as fit (cut, said in the notes); steps 0 and no
    tasks if not one task fits with one `step_quantum`. `seconds`: the time to plan."""
    tasks = list(steps_a_task)

    def steps_that_fit(count):
        left = seconds - cost(pace, 0, tasks[:count], steps_a_task, encoders, variants)
        return max(0, int(left / (variants * pace["pretrain_step_seconds"]))
                   // step_quantum * step_quantum)

    for count in range(len(tasks), 0, -1):
        if steps_that_fit(count) >= aim:
            return min(steps_that_fit(count), most), tasks[:count], []
    for count in range(min(2, len(tasks)), 0, -1):
        if steps_that_fit(count) >= step_quantum:
            return steps_that_fit(count), tasks[:count], [
                f"cut: at this pace the window holds {steps_that_fit(count)} pre-training "
                f"steps with {', '.join(tasks[:count])}, below the aim of {aim}"]
    return 0, [], [f"nothing planned: at this pace not one task's fine-tuning fits with "
                   f"{step_quantum} pre-training steps in {seconds:.0f} s"]


def cost(pace, steps, tasks, steps_a_task, encoders, variants):
    """Seconds the plan takes on the card, every job as if alone: each variant's grid
    (its processes' starts, set-up, compile, saves and steps), then each task's compile
    and each encoder's run of it."""
    grids = variants * (PROCESSES_A_VARIANT * pace["start_seconds"] + sum(pace[key] for key in (
        "pretrain_setup_seconds", "pretrain_compile_seconds", "pretrain_save_seconds"))
        + steps * pace["pretrain_step_seconds"])
    return grids + sum(pace["finetune_compile_seconds"] + encoders * (
        pace["finetune_fixed_seconds"] + steps_a_task[t] * pace["finetune_step_seconds"])
        for t in tasks)


# === the calibration (there) ===

def note_unplanned(work, calibration):
    """After the window: where the calibration left no plan (stopped at the deadline, or
    failed: `calibration`, its process record), a plan record that says so; else None."""
    from experiments import records

    if read_plan(work) is not None:
        return None
    how = {"not started": "did not start before the window's stop",
           True: "was stopped at the window's stop"}.get(
        calibration.get("stopped"), f"exited {calibration.get('exit')}")
    note = (f"nothing planned: the calibration {how} before it planned (its log: "
            "logs/calibrate.log); no study job started")
    return records.write_json(plan_path(work), {"plan": {"run": False}, "notes": [note],
                                                "lines": [note], "written": records.now()})


def measure(pretrain, finetune, scratch, pace):
    """The card's figures into `pace` as they come: a pre-training grid step of TUPE-A at
    the study's K and batch, and a fine-tuning grid step at the study's rates x seeds on its
    first task, each with its compile and what a run pays besides its steps (loading,
    packing, the dev split's prediction)."""
    import dataclasses

    from experiments.config import pretrain_config, variants
    from keras_tupe.finetuning.glue import finetune_glue_grid
    from keras_tupe_base.settings import FinetuneConfig
    from keras_tupe.pretraining import grid_pretrainer, write_preset

    pace["start_seconds"] = time.time() - START
    grid = pretrain["grid"]
    dispatch = grid.get("steps_per_dispatch", 100)
    chosen = [v for v in variants(pretrain) if v.variant == "tupe_a"] or variants(pretrain)
    seeds = [v for v in chosen if v.group == chosen[0].group]
    config = dataclasses.replace(pretrain_config(pretrain, seeds[0]), steps=3 * dispatch,
                                 save_steps=[], eval_every=dispatch)
    begun = time.perf_counter()
    trainer, source, rows, masking = grid_pretrainer(
        config, [(v.seed, config.learning_rate) for v in seeds], dispatch)
    first = time.perf_counter()
    trainer.fit(source, rows[:dispatch], transform=masking)  # compiles
    second = time.perf_counter()
    trainer.fit(source, rows[dispatch:], transform=masking)
    step = (time.perf_counter() - second) / (2 * dispatch)
    pace.update(pretrain_members=len(seeds), pretrain_variant=seeds[0].group,
                pretrain_setup_seconds=first - begun, pretrain_step_seconds=step,
                pretrain_compile_seconds=max(0.0, second - first - dispatch * step),
                pretrain_tokens_per_second=len(seeds) * config.batch_size * config.seq_len / step)
    init = os.path.join(scratch, "init")
    begun = time.perf_counter()
    write_preset(trainer.member_model(0), config.vocab, config, init)
    # a run saves each seed at step 0, at 30% and at its end
    pace["pretrain_save_seconds"] = 3 * len(seeds) * (time.perf_counter() - begun)

    task, settings = finetune["tasks"][0], finetune["settings"]
    members = [(rate, seed) for rate in finetune["learning_rates"] for seed in finetune["seeds"]]
    run = FinetuneConfig(task=task, init=init, data_dir=finetune["data_dir"], vocab=config.vocab,
                         lowercase=pretrain["vocabulary"]["lowercase"], **{
                             **settings, "epochs": 1,
                             "max_train_examples": 3 * dispatch * settings["batch_size"]})
    timed = []
    # Twice the same run: the first compiles, the second finds the compilation cache. The
    # schedule's length is compiled in, so a run of another length would compile again.
    for _ in range(2):
        begun = time.perf_counter()
        rows = finetune_glue_grid(run, [r for r, _ in members], [s for _, s in members],
                                  **dict(finetune.get("grid") or {}))
        timed.append((time.perf_counter() - begun, rows[0]["train_seconds"]))
    (cold, _), (warm, training) = timed
    steps = rows[0]["epochs"] * -(-rows[0]["train_examples"] // settings["batch_size"])
    pace.update(finetune_members=len(members), finetune_task=task,
                finetune_step_seconds=training / steps,  # a cache load counted in
                finetune_fixed_seconds=warm - training,
                finetune_compile_seconds=max(0.0, cold - warm))
    return pace


def calibrate(work, stop, margin=0.15, most=2.0):
    """Measures (`measure`), plans (`choose`) for the time left before `stop` (epoch
    seconds) less `margin` of it, rewrites the prepared configs to the plan and writes the
    plan record; returns it."""
    import tempfile

    from experiments import records
    from experiments.config import load_config
    from experiments.plans import finetune_plan

    paths = {kind: os.path.join(work, f"{kind}.json") for kind in ("pretrain", "finetune")}
    pretrain, finetune = (load_config(paths[kind]) for kind in ("pretrain", "finetune"))
    pace = {}
    with tempfile.TemporaryDirectory() as scratch:
        measure(pretrain, finetune, scratch, pace)
    seconds = (stop - time.time()) * (1 - margin)
    dispatch = pretrain["grid"].get("steps_per_dispatch", 100)
    aim, settings = pretrain["settings"]["steps"], pretrain["settings"]
    step_quantum = quantum(settings, dispatch)
    steps_a_task = task_steps(finetune)
    encoders, groups = len(finetune_plan(finetune)), len(pretrain["variants"])
    steps, tasks, notes = choose(pace, seconds, aim, max(aim, int(aim * most) // step_quantum
                                                         * step_quantum),
                                 step_quantum, steps_a_task, encoders, groups)
    tokens = steps * settings["batch_size"] * settings["seq_len"]
    plan = {"run": bool(tasks), "steps": steps, "save_steps": [0, round(0.3 * steps)],
            "tasks": tasks, "tokens_an_encoder": tokens, "aim_steps": aim,
            "seconds_to_plan": round(seconds, 1), "margin": margin,
            "planned_seconds": round(cost(pace, steps, tasks, steps_a_task, encoders, groups), 1),
            "encoders_fine_tuned": encoders, "grid_steps_a_task": steps_a_task}
    lines = [f"calibration: pre-training {pace['pretrain_members']} {pace['pretrain_variant']} "
             f"seeds at batch {settings['batch_size']} x {settings['seq_len']}: "
             f"{pace['pretrain_step_seconds'] * 1000:.1f} ms a grid step "
             f"({pace['pretrain_tokens_per_second'] / 1e6:.2f}M tokens/s), compile "
             f"{pace['pretrain_compile_seconds']:.1f} s; fine-tuning {pace['finetune_task']} "
             f"{pace['finetune_members']} members: {pace['finetune_step_seconds'] * 1000:.1f} ms "
             f"a grid step, compile {pace['finetune_compile_seconds']:.1f} s, the rest of a run "
             f"{pace['finetune_fixed_seconds']:.1f} s; a process starts in "
             f"{pace['start_seconds']:.1f} s",
             f"plan: {steps} pre-training steps ({tokens / 1e6:.1f}M tokens an encoder, "
             f"{tokens / 65.5e6:.2f}x S1's 65.5M; aim {aim}), then {encoders} encoders on "
             f"{', '.join(tasks)}: about {plan['planned_seconds']:.0f} s of the "
             f"{seconds:.0f} s left less a {margin:.0%} margin" if tasks else
             f"plan: none in the {seconds:.0f} s left less a {margin:.0%} margin", *notes]
    record = {"pace": pace, "plan": plan, "notes": notes, "lines": lines,
              "basis": "this window's calibration (experiments/budget.py): TUPE-A's grid "
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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.budget", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work", help="the stage's work folder (pretrain.json, finetune.json)")
    parser.add_argument("--stop", type=float, required=True, help="epoch seconds: the stop")
    parser.add_argument("--margin", type=float, default=0.15)
    parser.add_argument("--most", type=float, default=2.0,
                        help="the most steps, as a multiple of the study's aim")
    args = parser.parse_args(argv)
    calibrate(args.work, args.stop, args.margin, args.most)
    return 0


if __name__ == "__main__":
    sys.exit(main())

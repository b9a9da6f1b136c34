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


def task_steps(finetune):
    """`{task: grid steps}` of the study's fine-tuning, from the prepared GLUE files."""
    from experiments.stage import _cap
    from keras_tupe.data.glue import get_task

    steps = {}
    for task in map(get_task, finetune["tasks"]):
        with open(os.path.join(finetune["data_dir"], task.directory,
                               task.split_files["train"]), encoding="utf-8") as f:
            examples = min(sum(1 for _ in f) - 1, _cap(finetune, task.name) or math.inf)
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


# === the programme's three windows (here, printed by `prepare`) ===

def programme(name, pace, limit):
    """Each window's plan (stages.json `windows`), its estimate in seconds and the basis:
    (i) the planned GLUE study (`W1`: steps and tasks set on the card) and the benchmark
    headline, (ii) the length study and Huang's SQuAD study, (iii) the rest of the
    benchmark. Refuses window (i) if even one task after the least pre-training cannot fit
    at the projection's fastest pace."""
    from experiments.config import StudyError, load_config, variants
    from experiments.stage import load_stages, stage_configs, stage_spec

    stages = load_stages()
    window = stages["machine"]["window_seconds"]
    assumed = stages["stages"]["W1"]["plan"]["assumed"]
    lines = [f"The programme in three windows ({window} s of device time each, calls of at "
             f"most {stages['machine']['call_seconds']} s; a call runs {limit:.0f} s once the "
             f"install and the stop are counted):"]
    # (i): pre-training and fine-tuning member-steps at the projection's two ends
    pretrain, finetune = stage_configs(stage_spec("W1"))
    settings = pretrain["settings"]
    runs = len(variants(pretrain))
    scale = settings["batch_size"] * settings["seq_len"] / (32 * 128)  # member-steps of 32 x 128
    encoders = len(__import__("experiments.report", fromlist=["finetune_plan"]).finetune_plan(
        finetune))
    members = len(finetune["learning_rates"]) * len(finetune["seeds"])
    steps_a_task = task_steps(finetune)
    fixed = len(finetune["tasks"]) * assumed["compile_seconds"] + 2 * len(
        pretrain["variants"]) * (pace["finetune_start_seconds"] + assumed["compile_seconds"])
    estimates = [runs * settings["steps"] * scale / rate_p + encoders * members * sum(
        steps_a_task.values()) / rate_f + fixed for rate_p, rate_f in zip(
        reversed(assumed["pretrain_member_steps"]), reversed(assumed["finetune_member_steps"]))]
    tokens = settings["steps"] * settings["batch_size"] * settings["seq_len"]
    lines.append(
        f"(i) W1, the GLUE study that decides T2 and T3 and the benchmark headline: "
        f"{stages['stages']['W1']['plan']['headline']} (base, bf16); then "
        f"{len(pretrain['variants'])} variants x seeds {pretrain['grid']['seeds']} pre-trained"
        f" as one program a variant, aim {settings['steps']} steps of {settings['batch_size']}"
        f" x {settings['seq_len']} ({tokens / 1e6:.0f}M tokens an encoder, "
        f"{tokens / 65.5e6:.0f}x S1's), then {encoders} encoders x {members} members a task "
        f"on {', '.join(finetune['tasks'])} ({sum(steps_a_task.values())} grid steps an "
        f"encoder): about {estimates[0]:.0f}-{estimates[1]:.0f} s at the aim, against "
        f"{limit:.0f} s; basis: the projection of docs/benchmarks.md (the grid at 5-20% of "
        f"the card's bf16 peak: {assumed['pretrain_member_steps']} pre-training and "
        f"{assumed['finetune_member_steps']} fine-tuning member-steps of 32 x 128 a second), "
        f"{assumed['compile_seconds']} s a compile (stated) and S0's process start "
        f"({pace['finetune_start_seconds']:.0f} s). Not the plan: the card's first minute "
        f"times the grids at this K and sets the steps and tasks (experiments/budget.py); "
        f"a pace too slow for the aim cuts the steps, then the last tasks, and says so in "
        f"logs/plan.json.")
    least = len(pretrain["variants"]) * (2 * pace["finetune_start_seconds"]) + runs * quantum(
        settings, pretrain["grid"].get("steps_per_dispatch", 100)) * scale / assumed[
        "pretrain_member_steps"][1] + encoders * members * steps_a_task[
        finetune["tasks"][0]] / assumed["finetune_member_steps"][1]
    if least > limit:
        raise StudyError(f"Stage {name} does not fit: even the least plan (the first task after "
                         f"the least pre-training) takes about {least:.0f} s of {limit:.0f} s "
                         "at the projection's fastest pace. Shrink glue_w1 or w1_pretrain.")
    # (ii): S5a-c and S6 at the recorded pace, SQuAD and the length scoring counted
    step, at_once = pace["pretrain_step_seconds"], pace["at_once"]
    tune = pace.get("finetune_task_step_seconds", {}).get("sst2", pace["finetune_step_seconds"])
    parts = []
    for stage in stages["windows"]["(ii)"]:
        spec = stage_spec(stage)
        train, then = stage_configs(spec)
        count = len(spec.get("variants") or train["variants"])
        seconds = -(-count // at_once) * train["settings"]["steps"] * step
        if then["kind"] == "length":
            seconds += count * len(then["lengths"]) * assumed["length_seconds"]
            what = f"{count} encoders pre-trained and scored at {then['lengths']}"
        else:
            with open(then["squad_file"]) as f:
                questions = sum(len(q["qas"]) for a in json.load(f)["data"]
                                for q in a["paragraphs"])
            runs_an_encoder = len(then["learning_rates"]) + len(then["seeds"]) - 1
            squad = count * runs_an_encoder * then["settings"]["epochs"] * -(-round(
                questions * (1 - then["settings"]["eval_fraction"])
                * assumed["squad_windows_a_question"]) // then["settings"]["batch_size"])
            seconds += squad * tune + count * pace["finetune_start_seconds"]
            what = (f"{count} encoders pre-trained, then SQuAD ({squad} steps: {count} x "
                    f"{runs_an_encoder} runs x {then['settings']['epochs']} epochs)")
        parts.append((stage, what, seconds))
    total = sum(seconds for _, _, seconds in parts)
    lines.append(f"(ii) the 12-encoding length study and Huang's SQuAD study: " + "; ".join(
        f"{stage} {what}: about {seconds:.0f} s" for stage, what, seconds in parts)
        + f"; in all about {total:.0f} s, {total / limit:.1f} calls of {limit:.0f} s"
        + (" (one window)" if total <= window - 60 else
           ": more than one window at this pace") + f"; basis: {pace['basis']} "
        f"({step * 1000:.1f} ms a pre-training step, {at_once} at once; a SQuAD step as long "
        f"as an SST-2 one, {tune:.3f} s, run by run), "
        f"{assumed['squad_windows_a_question']} windows of {then['settings']['seq_len']} a "
        f"question and {assumed['length_seconds']} s a length an encoder (stated).")
    # (iii): every S2 row but the headline's
    from benchmarks.encoders.cli import parse_args

    rows = {}
    for stage in stages["windows"]["(iii)"]:
        args = parse_args(stage_spec(stage)["command"][1:])
        for mode in set(args.modes):
            rows[mode] = rows.get(mode, 0) + len(set(args.variants)) * len(set(
                args.precisions)) * len(set(args.seq_lens)) * (2 if args.flash == "both" else 1)
    rows["train"] -= assumed["headline_rows"]  # measured in window (i)
    seconds = sum(count * pace["benchmark_row_seconds"][mode] for mode, count in rows.items())
    lines.append(f"(iii) the rest of the benchmark ({', '.join(stages['windows']['(iii)'])}, "
                 f"less the headline's {assumed['headline_rows']} rows): "
                 + ", ".join(f"{count} {mode} rows" for mode, count in sorted(rows.items()))
                 + f", about {seconds:.0f} s, {seconds / limit:.1f} calls; basis: "
                 f"{pace['benchmark_row_seconds']} s a row (stated; window (i)'s headline "
                 "times the real one).")
    return lines


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
    from keras_tupe.finetuning_configs import FinetuneConfig
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
    from experiments.report import finetune_plan

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

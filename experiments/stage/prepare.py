"""`prepare` (here): refuses a stage that would not fit its call, estimates its time on the
card, and writes `.stage/NAME/`: its data, the wheels, the encoders it carries, and the
command to run there."""

import glob
import json
import lzma
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import version

from benchmarks.encoders.cli import parse_args as benchmark_args  # flags of a stage's command
from experiments import records
from experiments.config import StudyError, ensure_vocabulary, vocabulary_record_path
from experiments.plans import finetune_plan
from experiments.stage import budget, collect, specs
from keras_tupe_base.staging import staged


def prepare(name, tiny=False, dest=specs.STAGE_DIR, encoders=None):
    """Refuses a stage that would not fit, then writes `dest/NAME[_tiny]/` (`encoders`: what
    an earlier call brought home, carried xz-compressed; with every final one there, no
    shards travel); returns what travels and, last, the command to run there."""
    spec, machine = specs.stage_spec(name), specs.load_stages()["machine"]
    _check_size(name, machine["carry_bytes"])  # the working tree alone: before any work
    brought = _carried_encoders(name, spec, tiny, encoders) if encoders else {}
    full = specs.stage_configs(spec)
    if full[0] and not tiny and "calibrate" not in spec:  # S0's runs are scratch runs
        _recorded_elsewhere(*full, specs.chosen_variants(spec, full[0]), encoders)
    lines = [] if tiny else estimate(name, spec, configs=full,  # refuses before any work
                                     carried=bool(brought.get("all")))
    folder = os.path.join(dest, name + ("_tiny" if tiny else ""))
    with staged(folder, folder=True) as staging:  # replaces the previous preparation whole
        data = os.path.join(staging, "data")
        os.makedirs(data)
        pretrain, then = specs.stage_configs(spec, tiny, os.path.join(staging, "work"))
        if pretrain:
            _prepare_pretraining(pretrain, data, tiny, shards=not brought.get("all"))
        for relative, path in brought.get("files", {}).items():
            target = os.path.join(staging, specs.ENCODERS, relative + ".xz")
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(path, "rb") as source, lzma.open(target, "wb") as f:
                shutil.copyfileobj(source, f)
        if then and then["kind"] == "length":
            from experiments.length_study import write_prepared  # imports keras_tupe

            write_prepared(then, os.path.join(data, "length"))
        elif then:
            _prepare_finetune_data(full[1], data, tiny)
        with tarfile.open(os.path.join(staging, "data.tar.xz"), "w:xz") as archive:
            for part in sorted(os.listdir(data)):  # token ids compress to about half
                archive.add(os.path.join(data, part), arcname=part)
        shutil.rmtree(data)
        platforms = ("2014", "_2_17", "_2_24", "_2_27", "_2_28")  # the lent machine's: x86_64,
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",  # CPython 3.12
                        "--only-binary=:all:", "--python-version=3.12", "--implementation=cp",
                        *(f"--platform=manylinux{p}_x86_64" for p in platforms),
                        "-d", os.path.join(staging, "wheels"),  # the versions installed here
                        *(f"{wheel}=={version(wheel)}" for wheel in specs.load_stages()["wheels"])],
                       check=True)
        records.write_text(os.path.join(staging, specs.WHEELS_LIST), "".join(  # what must arrive
            f"{wheel}\n" for wheel in sorted(os.listdir(os.path.join(staging, "wheels")))))
        wheels = specs.bytes_of(glob.glob(os.path.join(staging, "wheels", "*")))
        carried = specs.bytes_of(os.path.join(root, n) for root, _, names in os.walk(staging)
                         for n in names)
        parts = _check_size(name, machine["carry_bytes"],
                            {"the prepared data": carried - wheels, "the wheels": wheels})
    tree, limit = parts["tracked files"] + parts["untracked files"], machine["carry_bytes"]
    lines.append(f"{folder}: {carried / 2**20:.1f} MiB; working tree {tree / 2**20:.1f} MiB; "
                 f"travels {(carried + tree) / 2**20:.1f} of {limit / 2**20:.0f}")
    if brought:
        lines.append(f"carried encoders: {len(brought['files'])} (sha256 as recorded), "
                     + ("every final one: no pre-training, no shards" if brought["all"]
                        else "the other variants pre-train"))
    first = (f"command (carry {folder}; --deadline: the call's timeout_s less 15): "
             + device_command(name, folder, tiny, machine["call_seconds"] - 15, bool(brought)))
    if "plan" not in spec:
        return lines + [first]
    timeout = machine["call_seconds"] + machine["pause_seconds"] + machine["start_seconds"]
    return lines + [first, (
        f"second call, at once on the same warm machine (carry {folder}; timeout_s: the "
        f"device time left less 10, at most {machine['call_seconds']}, planned "
        f"{machine['window_seconds'] - timeout}; --deadline: that less 15): "
        + device_command(name, folder, tiny, machine["window_seconds"] - timeout - 15,
                         call=2))]


def _check_size(name, limit, prepared=None):
    """What travels, by part ({part: bytes}); refuses (one line: the parts with their sizes,
    the largest untracked files, what to do) where it passes `limit` bytes. The working
    tree travels whole, its untracked files too; `prepared`: the stage folder's parts."""
    def listed(*flags):
        return [path for path in subprocess.run(
            ["git", "ls-files", "-z", *flags], capture_output=True, check=True
        ).stdout.decode().split("\0") if os.path.isfile(path)]

    untracked = listed("--others", "--exclude-standard")
    parts = {"tracked files": specs.bytes_of(listed("--cached")),
             "untracked files": specs.bytes_of(untracked), **(prepared or {})}
    if sum(parts.values()) <= limit:
        return parts
    largest, excess = [], sum(parts.values()) - limit  # the fewest that make it fit, up to 3
    for path in sorted(untracked, key=os.path.getsize, reverse=True)[:3]:
        if excess > 0:
            largest.append(path)
            excess -= os.path.getsize(path)
    fix = ("Move the untracked files that need not travel out of the working tree (or list "
           "them in .gitignore), e.g. "
           + ", ".join(f"{path} ({os.path.getsize(path) / 2**20:.1f} MiB)" for path in largest)
           if sum(parts.values()) - parts["untracked files"] <= limit and largest else
           "Shrink the stage (stages.json) or the data it prepares")
    raise StudyError(
        f"Stage {name} does not fit: {sum(parts.values()) / 2**20:.1f} MiB would travel, the "
        f"limit is {limit / 2**20:.0f} MiB: " + ", ".join(
            f"{part} {size / 2**20:.1f} MiB" for part, size in parts.items()) + f". {fix}.")


def device_command(name, folder, tiny, deadline, encoders=False, call=1):
    """The one command for the lent machine: the clock starts before the install."""
    site = "${TMPDIR:-/tmp}/stage_site"
    return (f"T0=$(date +%s); python3 -m pip install -q --no-index --no-deps --no-compile "
            f"--upgrade --target {site} {folder}/wheels/*.whl && PYTHONPATH={site} "
            f"KERAS_BACKEND=jax python3 -m experiments.stage run {name}"
            f"{' --tiny' if tiny else ''} --started $T0 --deadline {deadline} --out $OUT"
            f"{f' --encoders {folder}/{specs.ENCODERS}' if encoders else ''}"
            f"{f' --call {call}' if call != 1 else ''}")


def _carried_encoders(name, spec, tiny, folder):
    """The encoders in `folder` that the stage fine-tunes, `{"files": {name: path}, "all":
    every final one is there}`, each checked against the sha256 of its stage record; one
    that no record names cannot be checked, so it is refused."""
    with tempfile.TemporaryDirectory() as work:  # the names alone: nothing is kept
        pretrain, then = specs.stage_configs(spec, tiny, work)
        jobs = specs.finetune_jobs(spec, pretrain, then)
    recorded, sources = _recorded_encoders(name, tiny, folder)
    names = [specs.encoder_name(job["pretrain_study"], job["variant"], job["step"]) for job in jobs]
    files = {}
    for encoder in (name for name in names if os.path.exists(os.path.join(folder, name))):
        path = os.path.join(folder, encoder)
        if encoder not in recorded:
            raise StudyError(f"{path}: no stage record names it (read {' and '.join(sources)};"
                             f" they name {', '.join(sorted(recorded)) or 'no encoder'}), so "
                             "its sha256 cannot be checked: not carried.")
        digest = specs.encoder_sha256(path)
        if recorded[encoder] != digest:
            raise StudyError(f"{path}: its sha256 {digest} is not the one its stage record "
                             f"holds ({recorded[encoder]}): not carried.")
        files[encoder] = path
    if not files:
        raise StudyError(f"{folder}: none of stage {name}'s encoders is there (looked for "
                         f"{', '.join(names) or 'none: it fine-tunes nothing'}).")
    final = {encoder for job, encoder in zip(jobs, names)
             if job["step"] == pretrain["settings"]["steps"]}
    return {"files": files, "all": final <= set(files)}


def _recorded_encoders(name, tiny, folder):
    """`({encoder: sha256}, where it looked)` from the stage records: the committed one (not
    for a rehearsal), then the one that came back beside `folder`, as `logs/stage.json` or
    inside the records pack."""
    beside = os.path.dirname(os.path.abspath(folder))
    committed = os.path.join(specs.RECORDS, "stages", name, "logs", "stage.json")
    sources = ([] if tiny else [committed]) + [
        os.path.join(beside, "logs", "stage.json"), os.path.join(beside, specs.PACK)]
    recorded = {}
    for path in sources:
        record = _packed_record(path) if path.endswith(specs.PACK) else records.read_json(path, {})
        recorded.update({os.path.relpath(key, specs.ENCODERS): value["sha256"] for key, value in
                         record.get("encoders", {}).items()})
    return recorded, sources


def _packed_record(path):
    """The stage record inside the records pack at `path` (checked whole: `_read_pack`),
    or {} where there is no pack."""
    return json.loads(collect.read_pack(path)[collect.STAGE_RECORD]) if os.path.exists(path) else {}


def estimate(name, spec, pace=None, configs=None, carried=False):
    """The stage's time on the card, with its basis (`pace`: `gpu_pace()`'s); refuses a
    stage whose pre-training and first fine-tuning run of each final encoder would not fit
    (the rest goes on in a later call, from the encoders that came home). `carried`: every
    final encoder travels, so nothing pre-trains."""
    machine, pace, lines = specs.load_stages()["machine"], pace or specs.gpu_pace(), []
    limit = machine["call_seconds"] - specs.STOP_RESERVE - pace["install_seconds"]
    if "plan" in spec:  # planned on the card; here the programme's estimates
        return programme(name, pace, limit)
    if "command" in spec:
        args = benchmark_args(spec["command"][1:])
        rows = (len(set(args.variants)) * len(set(args.precisions)) * len(set(args.seq_lens))
                * (2 if args.flash == "both" else 1))
        needed = sum(rows * pace["benchmark_row_seconds"][mode] for mode in set(args.modes))
        what = f"{rows * len(set(args.modes))} benchmark rows"
    elif "calibrate" in spec:  # each round and the fine-tuning: a start and a few blocks
        rounds = len(spec["calibrate"]["processes"])
        pretrain = (configs or specs.stage_configs(spec))[0]
        needed = (rounds + 1) * pace["finetune_start_seconds"] + rounds * spec["calibrate"][
            "blocks"] * pretrain["settings"]["eval_every"] * pace["pretrain_step_seconds"]
        what = f"{rounds} pre-training rounds, then fine-tuning"
    else:
        pretrain, then = configs or specs.stage_configs(spec)
        runs, steps = len(spec.get("variants") or pretrain["variants"]), pretrain["settings"][
            "steps"]
        needed = 0 if carried else -(-runs // pace["at_once"]) * steps * pace[
            "pretrain_step_seconds"]
        what = ("no pre-training (every final encoder carried)" if carried else
                f"{runs} pre-training runs of {steps} steps, {pace['at_once']} at once")
        if then and then["kind"] == "finetune" and not then.get("squad_file"):
            from keras_tupe.data.glue import get_task  # imports keras_tupe

            # Its protocol on one encoder: with a selection seed, each rate with it, then
            # the other seeds at the chosen rate; records stream home run by run.
            per_encoder = (len(then["learning_rates"]) + len(then["seeds"]) - 1
                           if then.get("selection_seed") is not None
                           else len(then["learning_rates"]) * len(then["seeds"]))
            task_steps = {}
            for task in map(get_task, then["tasks"]):
                with open(os.path.join(then["data_dir"], task.directory,
                                       task.split_files["train"]), encoding="utf-8") as f:
                    cap = budget.train_cap(then, task.name) or math.inf
                    examples = min(sum(1 for _ in f) - 1, cap)
                task_steps[task.name] = per_encoder * then["settings"]["epochs"] * -(
                    -examples // then["settings"]["batch_size"])
            task, total = then["tasks"][0], sum(task_steps.values())
            run = task_steps[task] // per_encoder
            jobs = len(specs.finetune_jobs(spec, pretrain, then))
            needed += pace["finetune_start_seconds"] + run * pace.get(
                "finetune_task_step_seconds", {}).get(task, pace["finetune_step_seconds"])
            what += f", then a first {task} run on each final encoder at once ({run} steps)"
            lines.append(f"{name} fine-tuning in all: {jobs} encoders x {total} steps, about "
                         f"{jobs * total * pace['finetune_step_seconds'] / pace['at_once']:.0f}"
                         f" s at {pace['at_once']} at once, beside and after pre-training; "
                         "what a call does not finish goes on from the encoders it brought home")
    line = (f"{name}: {what}: about {needed:.0f} s of {limit:.0f} s (the call's "
            f"{machine['call_seconds']} s less the install and the stop); basis: {pace['basis']}")
    if needed > limit:
        raise StudyError(f"Stage {name} does not fit: {line}. Split it.")
    return [line, *lines]


def window_one(name, limit, pace=None):
    """Window (i)'s lines: what its two calls run at the pace of W1's latest calibration
    record (`w1_pace`; `pace` replaces it), planned as the card plans (`budget.choose`).
    Refuses the window, with the figures and their basis, when not even the least plan
    (the first task after one quantum of pre-training) fits both calls."""
    stages = specs.load_stages()
    spec, machine = stages["stages"]["W1"], stages["machine"]
    path = "given"
    if pace is None:
        pace, path = specs.w1_pace()
    pretrain, finetune = specs.stage_configs(specs.stage_spec("W1"))
    settings, margin = pretrain["settings"], spec["plan"]["margin"]
    dispatch = pretrain["grid"].get("steps_per_dispatch", 100)
    steps_a_task = budget.task_steps(finetune)
    encoders, groups = len(finetune_plan(finetune)), len(pretrain["variants"])
    measured = pace.get("finetune_encoders", 1)
    pace, together, members = specs.planned_pace(pace, pretrain, finetune, spec)
    calibration = specs.calibration_seconds(pace, dispatch)
    headline = specs.headline_record("W1")
    first = limit - calibration - (0 if headline else spec["plan"]["assumed"][
        "headline_seconds"])
    second, aim = specs.second_call_seconds(), settings["steps"]
    step_quantum = budget.quantum(settings, dispatch)
    steps, tasks, in_first, notes = budget.choose(
        pace, first * (1 - margin), aim, int(aim * spec["plan"]["most"]), step_quantum,
        steps_a_task, groups, groups, second * (1 - margin))
    basis = (f"basis: W1's calibration record ({path}: {pace['pretrain_step_seconds'] * 1000:.1f}"
             f" ms a pre-training grid step of {pace.get('pretrain_members', 3)} seeds "
             f"({pace['pretrain_tokens_per_second'] / 1e6:.2f}M tokens/s), compiles "
             f"{pace['pretrain_compile_seconds']:.0f} and {pace['finetune_compile_seconds']:.0f}"
             f" s" + (f"; a fine-tuning grid of {measured} encoder(s) timed there, so for "
                      f"{together} encoders x {members // together} members a step assumed "
                      f"at the pre-training grid's token rate with rows of "
                      f"{finetune['settings']['seq_len']}, "
                      f"{pace['finetune_step_seconds'] * 1000:.0f} ms, and a grid's host work "
                      f"the timed one's and {spec['plan']['assumed']['build_seconds']} s a model"
                      f" more (a build of a mini classifier on this CPU), "
                      f"{pace['finetune_fixed_seconds']:.0f} s"
                      if measured != together else
                      f"; {pace['finetune_step_seconds'] * 1000:.1f} ms a fine-tuning grid "
                      f"step of {members} members, {pace['finetune_fixed_seconds']:.1f} s a "
                      f"grid's host work") + f"), the machine's start "
             f"{machine['start_seconds']} s and the pause between calls "
             f"{machine['pause_seconds']} s (stated), a {margin:.0%} margin on each call")
    if not tasks:
        raise StudyError(f"Stage {name} does not fit: even the least plan (the first task "
                         f"after {step_quantum} pre-training steps) does not fit window (i)'s "
                         f"two calls ({first:.0f} s after the calibration, {second:.0f} s): "
                         f"{notes[0]}; {basis}. Shrink glue_w1 or w1_pretrain.")
    split = budget.window_split(pace, steps, tasks, in_first, steps_a_task, groups,
                                first * (1 - margin))
    tokens = steps * settings["batch_size"] * settings["seq_len"]
    return [
        f"(i) W1, the GLUE study that decides T2 and T3 and the benchmark headline, in two "
        f"calls on one warm machine (run folders in its temporary folder, outside the carry). "
        f"Call 1 (timeout_s {machine['call_seconds']}; {limit:.0f} s for its jobs): the "
        + (f"headline not again (its record is committed: {headline}); "
           if headline else f"headline ({spec['plan']['headline']}), about "
           f"{spec['plan']['assumed']['headline_seconds']} s; ")
        + f"the calibration, about {calibration:.0f} s; then, at the recorded pace, {steps} "
        f"pre-training steps of {settings['batch_size']} x {settings['seq_len']} "
        f"({tokens / 1e6:.0f}M tokens an encoder, {tokens / 65.5e6:.2f}x S1's; aim {aim}), "
        f"{groups} variants x seeds {pretrain['grid']['seeds']}, the variants' grids at once: "
        f"about {split['pretrain_seconds']:.0f} s; then {encoders} encoders x "
        f"{len(finetune['learning_rates']) * len(finetune['seeds'])} members a task, a "
        f"variant's encoders as one program (up to {together}), a process a variant, on "
        f"{', '.join(tasks[:in_first]) or 'no task'}: about "
        f"{split['first_call_seconds'] - split['pretrain_seconds']:.0f} s. Call 2 (timeout_s "
        f"about {second + 15 + machine['install_seconds'] + specs.STOP_RESERVE:.0f}: the window's "
        f"{machine['window_seconds']} s less the start, call 1 and the pause; {second:.0f} s "
        f"for its jobs): " + (f"{', '.join(tasks[in_first:])}, about "
                              f"{split['second_call_planned_seconds']:.0f} s. "
                              if tasks[in_first:] else "nothing left. ")
        + (" ".join(notes) + ". " if notes else "") + basis + ". Not the plan: the card's "
        "first minute times the grids again and plans from that (experiments/stage/budget.py)."]


def programme(name, pace, limit):
    """Each window's plan (stages.json `windows`), its estimate in seconds and the basis:
    (i) the planned GLUE study (`W1`: steps and tasks set on the card, in two calls) and
    the benchmark headline (`window_one`), (ii) the length study and Huang's SQuAD study,
    (iii) the rest of the benchmark. `limit`: a call's seconds for its jobs."""
    stages = specs.load_stages()
    window = stages["machine"]["window_seconds"]
    assumed = stages["stages"]["W1"]["plan"]["assumed"]
    lines = [f"The programme in three windows ({window} s of device time each, calls of at "
             f"most {stages['machine']['call_seconds']} s; a call runs {limit:.0f} s once the "
             f"install and the stop are counted):", *window_one(name, limit)]
    # (ii): S5a-c and S6 at the recorded pace, SQuAD and the length scoring counted
    step, at_once = pace["pretrain_step_seconds"], pace["at_once"]
    tune = pace.get("finetune_task_step_seconds", {}).get("sst2", pace["finetune_step_seconds"])
    parts = []
    for stage in stages["windows"]["(ii)"]:
        spec = specs.stage_spec(stage)
        train, then = specs.stage_configs(spec)
        count = len(spec.get("variants") or train["variants"])
        seconds = -(-count // at_once) * train["settings"]["steps"] * step
        if then["kind"] == "length":
            seconds += count * len(then["lengths"]) * assumed["length_seconds"]
            what = f"{count} encoders pre-trained and scored at {then['lengths']}"
        else:
            with open(then["squad_file"]) as f:
                questions = sum(len(q["qas"]) for a in json.load(f)["data"]
                                for q in a["paragraphs"])
            a_run = then["settings"]["epochs"] * -(-round(
                questions * (1 - then["settings"]["eval_fraction"])
                * assumed["squad_windows_a_question"]) // then["settings"]["batch_size"])
            if then.get("grid"):  # an encoder's runs as one program a round
                grid_seconds, what = squad_grid_seconds(then, a_run)
                seconds += count * grid_seconds + pace["finetune_start_seconds"]
                what = f"{count} encoders pre-trained, then SQuAD {what}"
            else:
                runs_an_encoder = len(then["learning_rates"]) + len(then["seeds"]) - 1
                squad = count * runs_an_encoder * a_run
                seconds += squad * tune + count * pace["finetune_start_seconds"]
                what = (f"{count} encoders pre-trained, then SQuAD ({squad} steps: {count} x "
                        f"{runs_an_encoder} runs x {then['settings']['epochs']} epochs, run "
                        f"by run, a step as long as an SST-2 one, {tune:.3f} s)")
        parts.append((stage, what, seconds))
    total = sum(seconds for _, _, seconds in parts)
    lines.append("(ii) the 12-encoding length study and Huang's SQuAD study: " + "; ".join(
        f"{stage} {what}: about {seconds:.0f} s" for stage, what, seconds in parts)
        + f"; in all about {total:.0f} s, {total / limit:.1f} calls of {limit:.0f} s"
        + (" (one window)" if total <= window - 60 else
           ": more than one window at this pace") + f"; basis: {pace['basis']} "
        f"({step * 1000:.1f} ms a pre-training step, {at_once} at once), "
        f"{assumed['squad_windows_a_question']} windows of {then['settings']['seq_len']} a "
        f"question and {assumed['length_seconds']} s a length an encoder (stated).")
    # (iii): every S2 row but the headline's
    rows = {}
    for stage in stages["windows"]["(iii)"]:
        args = benchmark_args(specs.stage_spec(stage)["command"][1:])
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


def squad_grid_seconds(config, steps):
    """`(seconds, what)`: one encoder's SQuAD runs of `config` (a study with `grid`), each
    round of its protocol one program of `steps` steps (`run_squad_protocol(grid=True)`),
    at the pace of W1's latest calibration record (`w1_pace`): its fine-tuning grid's step,
    compile and host work a round. The rounds counted are the most the protocol can take:
    every rate x every seed, then with a selection seed and edge rates an edge rate with
    it and that rate's other seeds."""
    pace, path = specs.w1_pace()
    settings = config["settings"]
    members = len(config["learning_rates"]) * len(config["seeds"])
    rounds = 3 if config.get("selection_seed") is not None and config.get(
        "edge_learning_rates") else 1
    # The timed grid's step, at its members and length; another count of members, or a
    # longer row, scaled at the pre-training grid's token rate (as `window_one`).
    timed_length = pace.get("finetune_length", settings["seq_len"])
    step = pace["finetune_step_seconds"] * max(1.0, settings["seq_len"] / timed_length)
    if members != pace.get("finetune_members", members):
        step = max(step, members * settings["batch_size"] * settings["seq_len"]
                   / pace["pretrain_tokens_per_second"])
    a_round = pace["finetune_compile_seconds"] + pace["finetune_fixed_seconds"] + steps * step
    return rounds * a_round, (
        f"as a grid an encoder ({members} members, {steps} steps; up to {rounds} rounds of "
        f"{a_round:.0f} s: a {step * 1000:.1f} ms step, a compile of "
        f"{pace['finetune_compile_seconds']:.0f} s and {pace['finetune_fixed_seconds']:.0f} s "
        f"of host work, W1's fine-tuning grid as {path} times it)")


def _prepare_pretraining(config, data, tiny, shards=True):
    """The vocabulary and (with `shards`) the token-id shards of stages.json, made here."""
    from keras_tupe.data.sharding import shard_corpus  # imports keras_tupe

    vocab = config["vocabulary"]
    ensure_vocabulary(config)
    for part, corpus in specs.load_stages()["shards"].items() if shards else ():
        shard_corpus([corpus], vocab["file"], os.path.join(data, "shards", part),
                     config["settings"]["seq_len"], lowercase=vocab["lowercase"],
                     max_lines=(specs.TINY["examples"] * {"train": 20, "valid": 4}[part]
                                if tiny else None))
    shutil.copy(vocab["file"], os.path.join(data, "vocab.txt"))
    shutil.copy(vocabulary_record_path(vocab), os.path.join(data, "vocab.json"))


def _prepare_finetune_data(config, data, tiny):
    """Each GLUE task's train and dev files (the first examples at `--tiny`), or the SQuAD
    file (at `--tiny`, the first paragraph of its first articles)."""
    from keras_tupe.data.glue import get_task  # imports keras_tupe

    if config.get("squad_file"):
        squad = records.read_json(config["squad_file"])
        if tiny:
            squad["data"] = [{**a, "paragraphs": [{**a["paragraphs"][0], "qas": a[
                "paragraphs"][0]["qas"][:specs.TINY["squad_questions"]]}]}
                for a in squad["data"][:specs.TINY["squad_articles"]]]
        return records.write_json(os.path.join(data, "squad", "squad.json"), squad)
    for task in map(get_task, config["tasks"]):
        for split in ("train", *task.eval_splits):
            lines = specs.TINY["examples"] if tiny else (
                budget.train_cap(config, task.name) if split == "train" else None)
            file = os.path.join(task.directory, task.split_files[split])
            with open(os.path.join(config["data_dir"], file), encoding="utf-8") as source:
                kept = [line for index, line in enumerate(source)
                        if lines is None or index <= lines]  # the header, then the examples
            records.write_text(os.path.join(data, "glue", file), "".join(kept))


def _recorded_elsewhere(pretrain, then, chosen, carried):
    """Refuses a stage whose fine-tuning or length study would wait for what cannot come: a
    run recorded in an earlier window (so skipped) with neither its run folder nor its
    final encoder here."""
    names = [v.name for v in chosen if then and not os.path.isdir(v.run_dir) and os.path.exists(
        records.record_dir(pretrain, v.name, records.RUN_RECORD)) and not specs.carried_path(
        carried, specs.encoder_name(pretrain["study"], v.name, pretrain["settings"]["steps"]))]
    if names:
        raise StudyError(
            f"{pretrain['study']}: {', '.join(names)} pre-trained in an earlier window (their "
            f"records are in {records.record_dir(pretrain)}), and neither their run folders "
            "nor their encoders are here, so their fine-tuning could never start. Give "
            "--encoders FOLDER (what that window brought home), or run the next stage.")

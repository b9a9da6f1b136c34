"""GPU stages: prepared here, run in one lent GPU window, every record streamed home
(stages.json; the contract: experiments/README.md, "The GPU stages").

    .venv/bin/python -m experiments.stage prepare S1 [--tiny] [--encoders DIR]  # here
    <the command prepare printed>                                 # there, carrying .stage/S1
    .venv/bin/python -m experiments.stage collect S1 FILES_AT     # here: the records
"""

import argparse
import contextlib
import glob
import gzip
import io
import json
import lzma
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from importlib.metadata import distributions, version

from benchmarks.encoders.cli import parse_args as benchmark_args  # flags of a stage's command
from experiments import budget, records, window
from experiments.config import (StudyError, ensure_vocabulary, load_config, require_models,
                                variants, vocabulary_record_path)
from experiments.plans import finetune_plan, protocol
from experiments.run import SETTINGS_FILE, run_grid, write_record
from keras_tupe_base.command_line import one_line_errors, quiet_start, run as run_cli
from keras_tupe_base.files import file_sha256, tree_sha256
from keras_tupe_base.staging import existing_ancestor, staged

STAGE_DIR, PACK, ENCODERS, WHEELS_LIST = ".stage", "records.tar.gz", "encoders", "wheels.txt"
RESULTS = os.path.join("docs", "results")  # `collect` files the records under RESULTS/records
RECORDS = os.path.join(RESULTS, "records")
# S0's calibration: made on this machine in the same window, else the record that came back.
CALIBRATIONS = (os.path.join(STAGE_DIR, "S0", "work", "logs", "calibration.json"),
                os.path.join(RECORDS, "stages", "S0", "logs", "calibration.json"))
# Seconds before the deadline: SIGTERM, SIGKILL after the grace, then the last pack; a run
# needs MIN_RUN_SECONDS once the install and the stop are counted.
STOP_GRACE, STOP_RESERVE, MIN_RUN_SECONDS = 8, 20, 30
# The tiny rehearsal: every setting that makes a run long, shrunk.
TINY = {"pretrain": {"steps": 50, "eval_every": 25, "valid_batches": 1, "save_steps": [0, 15],
                     "batch_size": 4, "seq_len": 32},
        "finetune": {"epochs": 1, "batch_size": 8, "seq_len": 32},
        "squad": {"doc_stride": 16, "max_query_length": 12, "max_train_examples": 8},
        "length": {"lengths": [32, 128, 256], "tokens_per_batch": 256, "batches": 2,
                   "max_lines": 300},
        "vocabulary": {"vocabulary_size": 300, "lines": 300},
        "benchmark": ["--size", "tiny", "--seq-lens", "32", "--repeats", "1", "--warmup", "0",
                      "--interleave", "--variants", "bert_a", "tupe_r", "keras_hub_bert"],
        "examples": 24, "tasks": 2, "squad_articles": 5, "squad_questions": 6, "dispatch": 5}


def load_stages():
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "stages.json")) as f:
        return json.load(f)


def stage_spec(name):
    """Stage `name`, with the keys of the stage it is `like` and its benchmark `command`."""
    stages = load_stages()
    if name not in stages["stages"]:
        raise StudyError(f"Unknown stage {name!r}. Valid: {', '.join(stages['stages'])}.")
    spec = {**stages["stages"].get(stages["stages"][name].get("like"), {}),
            **stages["stages"][name]}
    if "benchmark" in spec:
        spec["command"] = stages["benchmark"] + spec["benchmark"].split()
    return spec


def stage_configs(spec, tiny=False, work=None):
    """The stage's `(pretrain, then)` configs (`then`: its fine-tuning or length study;
    either may be None); with `tiny`, copies at the tiny size written into `work`."""
    pretrain, then = (spec.get(key) and load_config(spec[key]) for key in (
        "pretrain", "length" if "length" in spec else "finetune"))
    copied = tiny or "plan" in spec  # a planned window's: copies its calibration rewrites
    if copied and pretrain and work:
        raw = _raw(pretrain)
        if tiny:
            raw.update(size="tiny", vocabulary={
                **pretrain["vocabulary"], **TINY["vocabulary"],
                "file": os.path.join(work, "vocab.txt")}, settings={
                **pretrain["settings"], **TINY["pretrain"],
                "shards": os.path.join(work, "shards", "train"),
                "valid_shards": os.path.join(work, "shards", "valid")})
            if "grid" in raw:  # two seeds: a grid, at CI's time
                raw["grid"] = {**raw["grid"], "seeds": raw["grid"]["seeds"][:2],
                               "steps_per_dispatch": TINY["dispatch"]}
        pretrain = _write_config(work, "pretrain.json", raw)
    if copied and then and work:
        raw = {**_raw(then), "pretrain_configs": ["pretrain.json"]}
        if tiny and then["kind"] == "length":
            raw.update(TINY["length"])
        elif tiny:
            tasks = raw["tasks"][:TINY["tasks"]]
            raw.update(tasks=tasks, data_dir=os.path.join(work, "glue"),
                       learning_rates=raw["learning_rates"][:1], seeds=raw["seeds"][:1],
                       edge_learning_rates=[], selection_seed=raw["seeds"][0],
                       settings={**raw["settings"], **TINY["finetune"]},
                       task_settings={t: {"max_train_examples": TINY["examples"]}
                                      for t in tasks if t != "squad"},
                       checkpoint_variants={key: [name.rpartition("/")[2] for name in names]
                                            for key, names in
                                            raw.get("checkpoint_variants", {}).items()})
            if raw.get("squad_file"):
                raw["squad_file"] = os.path.join(work, "squad.json")
                raw["settings"].update(TINY["squad"])
            if raw.get("grid"):
                raw["grid"] = {**raw["grid"], "steps_per_dispatch": TINY["dispatch"]}
            if pretrain and "grid" in pretrain:  # only the tiny grid's seeds
                names = {v.name for v in variants(pretrain)}
                raw["variants"] = [n for n in raw.get("variants") or names if n in names]
                raw["checkpoint_variants"] = {key: [n for n in chosen if n in names] for
                                              key, chosen in raw["checkpoint_variants"].items()}
        then = _write_config(work, then["kind"] + ".json", raw)
    return pretrain, then


def _raw(config):
    """A loaded config as a study entry again (a pre-training `base` is resolved into it)."""
    base = ("base", "references", "seed", "overrides") if config["kind"] == "pretrain" else ()
    return {k: v for k, v in config.items()
            if not k.startswith("_") and k not in ("ceiling", *base)}


def _write_config(folder, name, raw):
    raw.update(runs_dir=os.path.join(folder, "runs"), results_dir=os.path.join(folder, "results"))
    return load_config(records.write_json(os.path.join(folder, name), raw))


# === prepare (here) ===

def prepare(name, tiny=False, dest=STAGE_DIR, encoders=None):
    """Refuses a stage that would not fit, then writes `dest/NAME[_tiny]/` (`encoders`: what
    an earlier call brought home, carried xz-compressed; with every final one there, no
    shards travel); returns what travels and, last, the command to run there."""
    spec, machine = stage_spec(name), load_stages()["machine"]
    _check_size(name, machine["carry_bytes"])  # the working tree alone: before any work
    brought = _carried_encoders(name, spec, tiny, encoders) if encoders else {}
    full = stage_configs(spec)
    if full[0] and not tiny and "calibrate" not in spec:  # S0's runs are scratch runs
        _recorded_elsewhere(*full, _chosen(spec, full[0]), encoders)
    lines = [] if tiny else estimate(name, spec, configs=full,  # refuses before any work
                                     carried=bool(brought.get("all")))
    folder = os.path.join(dest, name + ("_tiny" if tiny else ""))
    with staged(folder, folder=True) as staging:  # replaces the previous preparation whole
        data = os.path.join(staging, "data")
        os.makedirs(data)
        pretrain, then = stage_configs(spec, tiny, os.path.join(staging, "work"))
        if pretrain:
            _prepare_pretraining(pretrain, data, tiny, shards=not brought.get("all"))
        for relative, path in brought.get("files", {}).items():
            target = os.path.join(staging, ENCODERS, relative + ".xz")
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
                        *(f"{wheel}=={version(wheel)}" for wheel in load_stages()["wheels"])],
                       check=True)
        records.write_text(os.path.join(staging, WHEELS_LIST), "".join(  # what must arrive
            f"{wheel}\n" for wheel in sorted(os.listdir(os.path.join(staging, "wheels")))))
        wheels = _bytes(glob.glob(os.path.join(staging, "wheels", "*")))
        carried = _bytes(os.path.join(root, n) for root, _, names in os.walk(staging)
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
    parts = {"tracked files": _bytes(listed("--cached")), "untracked files": _bytes(untracked),
             **(prepared or {})}
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


def _bytes(paths):
    return sum(os.path.getsize(path) for path in paths if os.path.isfile(path))


def device_command(name, folder, tiny, deadline, encoders=False, call=1):
    """The one command for the lent machine: the clock starts before the install."""
    site = "${TMPDIR:-/tmp}/stage_site"
    return (f"T0=$(date +%s); python3 -m pip install -q --no-index --no-deps --no-compile "
            f"--upgrade --target {site} {folder}/wheels/*.whl && PYTHONPATH={site} "
            f"KERAS_BACKEND=jax python3 -m experiments.stage run {name}"
            f"{' --tiny' if tiny else ''} --started $T0 --deadline {deadline} --out $OUT"
            f"{f' --encoders {folder}/{ENCODERS}' if encoders else ''}"
            f"{f' --call {call}' if call != 1 else ''}")


def _carried_encoders(name, spec, tiny, folder):
    """The encoders in `folder` that the stage fine-tunes, `{"files": {name: path}, "all":
    every final one is there}`, each checked against the sha256 of its stage record; one
    that no record names cannot be checked, so it is refused."""
    with tempfile.TemporaryDirectory() as work:  # the names alone: nothing is kept
        pretrain, then = stage_configs(spec, tiny, work)
        jobs = _finetune_jobs(spec, pretrain, then)
    recorded, sources = _recorded_encoders(name, tiny, folder)
    names = [_encoder_name(job["pretrain_study"], job["variant"], job["step"]) for job in jobs]
    files = {}
    for encoder in (name for name in names if os.path.exists(os.path.join(folder, name))):
        path = os.path.join(folder, encoder)
        if encoder not in recorded:
            raise StudyError(f"{path}: no stage record names it (read {' and '.join(sources)};"
                             f" they name {', '.join(sorted(recorded)) or 'no encoder'}), so "
                             "its sha256 cannot be checked: not carried.")
        digest = _sha256(path)
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
    sources = ([] if tiny else [os.path.join(RECORDS, "stages", name, "logs", "stage.json")]) + [
        os.path.join(beside, "logs", "stage.json"), os.path.join(beside, PACK)]
    recorded = {}
    for path in sources:
        record = _packed_record(path) if path.endswith(PACK) else records.read_json(path, {})
        recorded.update({os.path.relpath(key, ENCODERS): value["sha256"] for key, value in
                         record.get("encoders", {}).items()})
    return recorded, sources


def _packed_record(path):
    """The stage record inside the records pack at `path` (checked whole: `_read_pack`),
    or {} where there is no pack."""
    return json.loads(_read_pack(path)[STAGE_RECORD]) if os.path.exists(path) else {}


def estimate(name, spec, pace=None, configs=None, carried=False):
    """The stage's time on the card, with its basis (`pace`: `gpu_pace()`'s); refuses a
    stage whose pre-training and first fine-tuning run of each final encoder would not fit
    (the rest goes on in a later call, from the encoders that came home). `carried`: every
    final encoder travels, so nothing pre-trains."""
    machine, pace, lines = load_stages()["machine"], pace or gpu_pace(), []
    limit = machine["call_seconds"] - STOP_RESERVE - pace["install_seconds"]
    if "plan" in spec:  # planned on the card; here the programme's estimates
        return programme(name, pace, limit)
    if "command" in spec:
        args = benchmark_args(spec["command"][1:])
        rows = (len(set(args.variants)) * len(set(args.precisions)) * len(set(args.seq_lens))
                * (2 if args.flash == "both" else 1))
        needed = sum(rows * pace["benchmark_row_seconds"][mode] for mode in set(args.modes))
        what = f"{rows * len(set(args.modes))} benchmark rows"
    elif "calibrate" in spec:  # each round and the fine-tuning: a start and a few blocks
        rounds, pretrain = len(spec["calibrate"]["processes"]), (configs or stage_configs(spec))[0]
        needed = (rounds + 1) * pace["finetune_start_seconds"] + rounds * spec["calibrate"][
            "blocks"] * pretrain["settings"]["eval_every"] * pace["pretrain_step_seconds"]
        what = f"{rounds} pre-training rounds, then fine-tuning"
    else:
        pretrain, then = configs or stage_configs(spec)
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
            run, jobs = task_steps[task] // per_encoder, len(_finetune_jobs(spec, pretrain, then))
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


def w1_pace():
    """`(pace, path)`: the pace of W1's latest calibration record that holds every figure
    the plan uses (`budget.measure`'s), committed under `records/stages/W1/`."""
    needed = ("start_seconds", "pretrain_setup_seconds", "pretrain_compile_seconds",
              "pretrain_save_seconds", "pretrain_step_seconds", "finetune_compile_seconds",
              "finetune_fixed_seconds", "finetune_step_seconds")
    found = sorted((record.get("written", ""), path) for path, record in (
        (path, records.read_json(path)) for path in glob.glob(
            os.path.join(RECORDS, "stages", "W1", "*", budget.PLAN)))
        if all(key in record.get("pace", {}) for key in needed))
    if not found:
        raise StudyError(f"No W1 calibration record with every figure the plan uses "
                         f"({', '.join(needed)}) under {os.path.join(RECORDS, 'stages', 'W1')}.")
    return records.read_json(found[-1][1])["pace"], found[-1][1]


def window_one(name, limit, pace=None):
    """Window (i)'s lines: what its two calls run at the pace of W1's latest calibration
    record (`w1_pace`; `pace` replaces it), planned as the card plans (`budget.choose`).
    Refuses the window, with the figures and their basis, when not even the least plan
    (the first task after one quantum of pre-training) fits both calls."""
    stages = load_stages()
    spec, machine = stages["stages"]["W1"], stages["machine"]
    path = "given"
    if pace is None:
        pace, path = w1_pace()
    pretrain, finetune = stage_configs(stage_spec("W1"))
    settings, margin = pretrain["settings"], spec["plan"]["margin"]
    dispatch = pretrain["grid"].get("steps_per_dispatch", 100)
    steps_a_task = budget.task_steps(finetune)
    encoders, groups = len(finetune_plan(finetune)), len(pretrain["variants"])
    measured = pace.get("finetune_encoders", 1)
    pace, together, members = planned_pace(pace, pretrain, finetune, spec)
    calibration = calibration_seconds(pace, dispatch)
    headline = headline_record("W1")
    first = limit - calibration - (0 if headline else spec["plan"]["assumed"][
        "headline_seconds"])
    second, aim = second_call_seconds(), settings["steps"]
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
        f"about {second + 15 + machine['install_seconds'] + STOP_RESERVE:.0f}: the window's "
        f"{machine['window_seconds']} s less the start, call 1 and the pause; {second:.0f} s "
        f"for its jobs): " + (f"{', '.join(tasks[in_first:])}, about "
                              f"{split['second_call_planned_seconds']:.0f} s. "
                              if tasks[in_first:] else "nothing left. ")
        + (" ".join(notes) + ". " if notes else "") + basis + ". Not the plan: the card's "
        "first minute times the grids again and plans from that (experiments/budget.py)."]


def planned_pace(pace, pretrain, finetune, spec):
    """`(pace, together, members)`: a planned window's `pace` (a calibration record's) for
    its fine-tuning grids of `together` encoders, `members` members; a grid timed with
    another count of encoders is scaled: its step at the pre-training grid's token rate,
    its host work the stated build seconds a model more."""
    together = max(budget.encoders_a_grid(pretrain, finetune).values())
    members = together * len(finetune["learning_rates"]) * len(finetune["seeds"])
    measured = pace.get("finetune_encoders", 1)
    if measured != together:
        tokens = members * finetune["settings"]["batch_size"] * finetune["settings"]["seq_len"]
        pace = {**pace, "finetune_encoders": together, "finetune_members": members,
                "finetune_step_seconds": max(pace["finetune_step_seconds"],
                                             tokens / pace["pretrain_tokens_per_second"]),
                "finetune_fixed_seconds": pace["finetune_fixed_seconds"] + (together - measured)
                * len(finetune["seeds"]) * spec["plan"]["assumed"]["build_seconds"]}
    return pace, together, members


def calibration_seconds(pace, dispatch):
    """Seconds a planned window's calibration takes at `pace`, as `budget.measure` runs it:
    a process's start, the grid's set-up, compile, 3 dispatches and a save; two fine-tuning
    runs of 3 dispatches, one compiling."""
    return (pace["start_seconds"] + pace["pretrain_setup_seconds"]
            + pace["pretrain_compile_seconds"] + 3 * dispatch * pace["pretrain_step_seconds"]
            + pace["pretrain_save_seconds"] / 9 + pace["finetune_compile_seconds"]
            + 2 * (pace["finetune_fixed_seconds"] + 3 * dispatch * pace["finetune_step_seconds"]))


def _check_calibration_fits(name, spec, tiny, deadline, started):
    """Refuses, before any work, a planned window's first call whose `--deadline` (seconds
    after `started`) comes before its calibration could plan: the install so far, the
    headline (unless its record is committed), the calibration at W1's recorded pace
    (`calibration_seconds`, `prepare`'s figure) and the stop."""
    pretrain, finetune = stage_configs(spec)
    recorded, path = w1_pace()
    pace = planned_pace(recorded, pretrain, finetune, spec)[0]
    dispatch = TINY["dispatch"] if tiny else pretrain["grid"].get("steps_per_dispatch", 100)
    calibration = calibration_seconds(pace, dispatch)
    headline = 0 if headline_record(name) else spec["plan"]["assumed"]["headline_seconds"]
    installed = time.time() - started
    needed = math.ceil(installed + headline + calibration + STOP_RESERVE)
    if deadline < needed:
        raise StudyError(
            f"--deadline {deadline:g} s ends before stage {name}'s calibration could plan: the "
            f"install {installed:.0f} s so far, " + (f"the headline about {headline} s, "
                                                     if headline else "")
            + f"the calibration about {calibration:.0f} s at the recorded pace ({path}) and the "
            f"stop {STOP_RESERVE} s. Give --deadline {needed} or more.")


def programme(name, pace, limit):
    """Each window's plan (stages.json `windows`), its estimate in seconds and the basis:
    (i) the planned GLUE study (`W1`: steps and tasks set on the card, in two calls) and
    the benchmark headline (`window_one`), (ii) the length study and Huang's SQuAD study,
    (iii) the rest of the benchmark. `limit`: a call's seconds for its jobs."""
    stages = load_stages()
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
        args = benchmark_args(stage_spec(stage)["command"][1:])
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
    pace, path = w1_pace()
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


def gpu_pace():
    """Seconds a step and a start on the card: S0's calibration (`CALIBRATIONS`), else the
    recorded GPU pre-training runs and stated estimates."""
    for path in CALIBRATIONS:
        calibration = records.read_json(path)
        if calibration:
            tasks = {task: run["warm_seconds"] / run["steps"]  # its second run: compiled
                     for task, run in calibration.get("finetune_tasks", {}).items()}
            return {**calibration["pace"], "calibrated": True, "basis": f"the S0 calibration "
                    f"({path})", **({"finetune_task_step_seconds": tasks} if tasks else {})}
    times = [run["wall_seconds"] / run["last_step"] for run in map(records.read_json, glob.glob(
        os.path.join(RECORDS, "*", "*", records.RUN_RECORD)))
        if "gpu" in run.get("versions", {}).get("machine", "") and run.get("last_step")]
    if not times:
        raise StudyError(f"No recorded GPU run to time a stage by ({RECORDS}).")
    step = max(times)
    return {"pretrain_step_seconds": step, "at_once": 4, "calibrated": False,
            "finetune_step_seconds": step, "finetune_start_seconds": 60,
            "benchmark_row_seconds": {"train": 60, "infer": 25}, "install_seconds": 15,
            "basis": f"the recorded GPU pre-training runs ({step * 1000:.1f} ms a step, "
                     "four at once), a fine-tuning step as long, the rest stated estimates"}


def _prepare_pretraining(config, data, tiny, shards=True):
    """The vocabulary and (with `shards`) the token-id shards of stages.json, made here."""
    from keras_tupe.data.sharding import shard_corpus  # imports keras_tupe

    vocab = config["vocabulary"]
    ensure_vocabulary(config)
    for part, corpus in load_stages()["shards"].items() if shards else ():
        shard_corpus([corpus], vocab["file"], os.path.join(data, "shards", part),
                     config["settings"]["seq_len"], lowercase=vocab["lowercase"],
                     max_lines=TINY["examples"] * {"train": 20, "valid": 4}[part] if tiny else None)
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
                "paragraphs"][0]["qas"][:TINY["squad_questions"]]}]}
                for a in squad["data"][:TINY["squad_articles"]]]
        return records.write_json(os.path.join(data, "squad", "squad.json"), squad)
    for task in map(get_task, config["tasks"]):
        for split in ("train", *task.eval_splits):
            lines = TINY["examples"] if tiny else (
                budget.train_cap(config, task.name) if split == "train" else None)
            file = os.path.join(task.directory, task.split_files[split])
            with open(os.path.join(config["data_dir"], file), encoding="utf-8") as source:
                kept = [line for index, line in enumerate(source)
                        if lines is None or index <= lines]  # the header, then the examples
            records.write_text(os.path.join(data, "glue", file), "".join(kept))


# === run (there) ===

def run(name, out, tiny=False, deadline=None, started=None, folder=None, encoders=None,
        call=1):
    """Runs the stage until `deadline` seconds after `started` (epoch seconds, default now),
    streaming its records into `out`; `encoders`: what an earlier call brought home,
    fine-tuned without pre-training again; `call`: a planned window's first or second call
    (`planned_work`). Returns the stage record."""
    machine, spec = load_stages()["machine"], stage_spec(name)
    started = started or time.time()
    deadline = deadline or machine["call_seconds"] - 15
    stop = started + deadline - STOP_RESERVE
    if stop - time.time() < MIN_RUN_SECONDS:
        raise StudyError(f"--deadline {deadline:g} s from --started leaves "
                         f"{stop - time.time():.0f} s once the install ({time.time() - started:.0f}"
                         f" s so far) and the stop ({STOP_RESERVE} s) are counted: a run needs "
                         f"{MIN_RUN_SECONDS} s. Give a longer --deadline.")
    if "plan" in spec and call == 1:  # a window whose calibration sets its budget
        _check_calibration_fits(name, spec, tiny, deadline, started)
    folder = folder or os.path.join(STAGE_DIR, name + ("_tiny" if tiny else ""))
    # Before anything imports Keras: a fresh HOME has no keras.json, and Keras's default
    # backend is TensorFlow, which the lent machine lacks.
    os.environ.setdefault("KERAS_BACKEND", "jax")
    _check_packages(folder)
    work = planned_work(name, tiny) if "plan" in spec else os.path.join(folder, "work")
    logs = os.path.join(work, "logs")
    lines = _planned_call(work, call) if "plan" in spec else []
    if "plan" in spec and call == 1:  # a window starts from nothing, as there
        shutil.rmtree(work, ignore_errors=True)
    for made in ("runs", "results", "logs") if tiny and "plan" not in spec else ():
        shutil.rmtree(os.path.join(work, made), ignore_errors=True)  # from nothing, as there
    if not os.path.exists(os.path.join(folder, "vocab.txt")):
        with tarfile.open(os.path.join(folder, "data.tar.xz")) as archive:
            archive.extractall(folder, filter="data")
    pretrain, then = (stage_configs(spec, tiny, work) if call == 1 or lines else (
        load_config(os.path.join(work, "pretrain.json")),  # as the first call's plan left them
        load_config(os.path.join(work, "finetune.json"))))
    os.makedirs(os.path.join(out, ENCODERS, pretrain["study"] if pretrain else ""),
                exist_ok=True)
    stage = {"stage": name, "tiny": tiny, "card": _card(),
             "command": records.command_line(sys.argv[1:], "python -m experiments.stage"),
             "versions": records.machine(),  # and the packages, to check gpu_image.txt by
             "pip_list": sorted(f"{d.metadata['Name']}=={d.version}" for d in distributions()),
             "started": records.now(), "install_seconds": round(time.time() - started, 1),
             "processes": [], "encoders": {}, **({"call": call, "notes": lines}
                                                  if "plan" in spec else {})}
    stage["_stop"] = stop  # a planned window's calibration plans until then
    jobs = _jobs(spec, pretrain, then, tiny, work, out, stage, encoders)
    stream = Stream(out, home_folders(spec, pretrain, then, work), stage, logs)
    if pretrain:
        _lay_out(pretrain, then, folder)
    env = job_environment()
    pace = gpu_pace()
    if "calibrate" in spec:  # its rounds need their processes at once
        stage["parallel"] = max(spec["calibrate"]["processes"])
    elif "plan" in spec:  # the variants' grids and compiles at once, then their fine-tuning
        stage["parallel"] = 2 * len(pretrain["variants"])
    elif pace["calibrated"] and not tiny:  # as many as served the card best where S0
        stage["parallel"] = max(pace["at_once"], 1 + sum(  # measured it, and one fine-tuning
            label.startswith("pretrain ") for label, _, _ in jobs))  # beside pre-training
    else:
        stage["parallel"] = max(1, (os.cpu_count() or 2) // 2)
    _schedule(jobs, stage["parallel"], stop, logs, env, stage, stream)
    if "plan" in spec and call == 1:  # a calibration that never planned: its record says so
        budget.note_unplanned(work, next(p for p in stage["processes"] if p["run"] == "calibrate"))
    stage["seconds"] = round(time.time() - started, 1)
    stream(force=True)
    print(f"stage {name}: {stage['seconds']:.0f} s; in {out}: "
          f"{', '.join(sorted(os.listdir(out)))}", flush=True)
    return stage


def job_environment():
    """Every job's environment: this one, and one persistent compilation cache for every
    process, outside the carried folder (a call's carry replaces that folder, so a cache in
    it starts empty each call; in the temporary folder it lasts while the machine is warm)."""
    return {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "PYTHONUNBUFFERED": "1",
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "JAX_COMPILATION_CACHE_DIR": os.path.join(tempfile.gettempdir(), "stage_xla_cache"),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}


def planned_work(name, tiny=False):
    """A planned window's work folder (its configs, run folders, records and each call's
    logs): in the machine's temporary folder, outside the carried `.stage/NAME`, which each
    call's carry replaces, so a second call on the same warm machine finds the first's."""
    return os.path.join(tempfile.gettempdir(), "stage_work", name + ("_tiny" if tiny else ""))


def _planned_call(work, call):
    """The notes of a planned window's call: a second call keeps the first call's logs aside
    (`budget.FIRST_LOGS`) and plans from them; one that finds no first call's work here (a
    fresh machine: it is gone) says so in one line, and plans nothing (a call alone needs
    the calibration and the grids first: a first call's)."""
    if call == 1:
        return []
    if not os.path.exists(os.path.join(work, "logs", budget.PLAN)) and not os.path.exists(
            budget.plan_path(work, budget.FIRST_LOGS)):
        line = (f"nothing planned: call {call} finds no first call's work here ({work} is "
                "absent: a fresh machine), so nothing of it can go on; a window starts with "
                "its first call's command")
        print(line, flush=True)
        return [line]
    if os.path.exists(os.path.join(work, budget.FIRST_LOGS)):  # a second call again: the
        shutil.rmtree(os.path.join(work, "logs"), ignore_errors=True)  # last one's went home
    elif os.path.exists(os.path.join(work, "logs")):  # the first call's: home already
        os.rename(os.path.join(work, "logs"), os.path.join(work, budget.FIRST_LOGS))
    return []


def home_folders(spec, pretrain, then, work):
    """What the stage sends home in its records pack, `(arcname, folder)`: each study's
    records, the logs and, for the calibration, its results; nothing else written comes."""
    return ([(c["study"], records.record_dir(c)) for c in (pretrain, then) if c]
            + [("logs", os.path.join(work, "logs"))]
            + ([("calibration", os.path.join(work, "calibration", "results"))]
               if "calibrate" in spec else []))


def _check_packages(folder):
    """Names each module the run path needs that this machine lacks, with the real error,
    and each wheel file `prepare` listed that did not arrive."""
    missing = []
    for module, wheel in (("keras", "keras"), ("keras_hub", "keras-hub"), ("jax", "jax"),
                          ("grain", "grain"), ("subword_nmt", "subword-nmt")):
        try:
            __import__(module)
        except ImportError as error:
            missing.append(f"{wheel} ({type(error).__name__}: {error})")
    if missing:
        listed = os.path.join(folder, WHEELS_LIST)
        wheels = open(listed).read().split() if os.path.exists(listed) else []
        absent = [w for w in wheels if not os.path.exists(os.path.join(folder, "wheels", w))]
        raise StudyError(f"This machine cannot import: {'; '.join(missing)}. " + (
            f"Not carried: {', '.join(absent)} (listed in {listed}, not in {folder}/wheels/). "
            if absent else "") + f"Carry the wheels ({folder}/wheels/, made by `prepare`) and "
            "install them first: run the command prepare printed, as it is.")


def _card():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30).stdout.strip() or "no GPU"
    except (OSError, subprocess.SubprocessError):
        return f"no GPU ({os.cpu_count()} cores)"


def _lay_out(pretrain, then, folder):
    """Links the carried shards, GLUE or SQuAD files and length batches where the configs
    name them (unless there already), and copies the vocabulary there."""
    links = [("shards/train", pretrain["settings"]["shards"]),
             ("shards/valid", pretrain["settings"]["valid_shards"])]
    if then and then["kind"] == "length":
        from experiments.length_study import prepared_dir  # imports keras_tupe

        links.append(("length", prepared_dir(then)))
    elif then:
        links.append(("squad/squad.json", then["squad_file"]) if then.get("squad_file")
                     else ("glue", then["data_dir"]))
    for source, target in (link for link in links if not os.path.exists(link[1])):
        os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
        os.symlink(os.path.abspath(os.path.join(folder, source)), target)
    vocab = pretrain["vocabulary"]
    if not os.path.exists(vocab["file"]):
        os.makedirs(os.path.dirname(vocab["file"]), exist_ok=True)
        shutil.copy(os.path.join(folder, "vocab.json"), vocabulary_record_path(vocab))
        shutil.copy(os.path.join(folder, "vocab.txt"), vocab["file"])


# What a damaged carried encoder raises as it is read: its xz stream, its tar, its weights.
UNREADABLE = (EOFError, OSError, ValueError, lzma.LZMAError, tarfile.TarError)


def _skipped(stage, label, path, error):
    stage["processes"].append({"run": label, "exit": None, "stopped": (
        f"not started: {path} unreadable ({type(error).__name__}: {error})")})
    print(f"{path}: unreadable ({type(error).__name__}: {error}); its fine-tuning is not run, "
          "the others go on", flush=True)


def _jobs(spec, pretrain, then, tiny, work, out, stage, carried=None):
    """Every process of the stage, `(label, command, ready)`, in priority order; `ready`
    says, once a second, whether it may start now. An encoder in `carried` is laid where
    its run kept it, and its variant is not pre-trained again; one that cannot be read is
    named in the record and not fine-tuned, and the other jobs go on."""
    if "command" in spec:
        return [("benchmark", [sys.executable, "-m", *spec["command"], "--out",
                               os.path.join(work, "logs", "benchmark"), "--overwrite",
                               *(TINY["benchmark"] if tiny else [])], None)]
    if "calibrate" in spec:
        return _calibration_jobs(spec["calibrate"], tiny, work, pretrain, then, stage)
    if "plan" in spec:
        return _planned_jobs(spec, tiny, work, pretrain, then, stage)
    chosen, ended, seen = _chosen(spec, pretrain), stage.setdefault("_ended", {}), {}
    # Keras's steps_per_execution, a divisor of eval_every and the save steps (5 at --tiny).
    speed = ["--steps-per-execution", str(math.gcd(spec.get("steps_per_execution", 1),
                                                   pretrain["settings"]["eval_every"],
                                                   *pretrain["settings"]["save_steps"]))]
    trained = [v.name for v in chosen if not _carried(carried, _encoder_name(
        pretrain["study"], v.name, pretrain["settings"]["steps"]))]
    jobs = [(f"pretrain {v}", _experiment("pretrain", pretrain, ["--variants", v, *speed]),
             None) for v in trained]
    if then["kind"] == "length":
        jobs.append(("length", _experiment("length", then, [
            "--variants", *[v.name for v in chosen]]),
            lambda: all(ended.get(f"pretrain {v.name}") for v in chosen)))
    fraction = {round(f * pretrain["settings"]["steps"]): f for f in then["checkpoints"]}
    first, later, tuning = [], [], []
    for job in _finetune_jobs(spec, pretrain, then):
        # ready once its checkpoint is written (the final model: once its run ended)
        final = fraction[job["step"]] == 1
        ready = (lambda init=job["init"], v=job["variant"], final=final: os.path.exists(init)
                 and (not final or v not in trained or ended.get(f"pretrain {v}")))
        label = f"{job['variant']} step {job['step']}"
        encoder = _encoder_name(job["pretrain_study"], job["variant"], job["step"])
        if _carried(carried, encoder):  # home already: laid out, not written again
            try:
                read_encoder(_carried(carried, encoder), job["init"], job["vocab"])
            except UNREADABLE as error:  # this encoder's fine-tuning is lost, not the rest
                _skipped(stage, f"encoder {label}", _carried(carried, encoder), error)
                continue
        else:
            (first if final else later).append((f"encoder {label}", [
                sys.executable, "-m", "experiments.stage", "encoder", job["init"],
                os.path.join(out, ENCODERS, encoder)], ready))
        tuning.append((f"finetune {label}", _experiment("finetune", then, [
            "--variants", job["variant"], "--checkpoints", repr(fraction[job["step"]]),
            *speed]), ready))

    def write_records():  # from the run folders: also a run killed mid-block
        for v in chosen:
            metrics = os.path.join(v.run_dir, "metrics.csv")
            mark = os.path.exists(metrics) and os.stat(metrics).st_mtime_ns, v.is_finished
            if seen.get(v.name) != mark:
                seen[v.name] = mark
                write_record(pretrain, v)
    stage["_records"] = write_records
    return jobs + first + later + tuning  # the final encoders first


def _calibration_jobs(spec, tiny, work, pretrain, then, stage):
    """S0: the pre-training rounds one after the other, then fine-tuning (from the first
    round's step-0 checkpoint) and the gradient test, then the summary."""
    folder, ended, jobs = os.path.join(work, "calibration"), stage.setdefault("_ended", {}), []

    def after(labels):
        return lambda: all(ended.get(label) for label in labels)
    until = str(spec["blocks"] * pretrain["settings"]["eval_every"])
    for n in spec["processes"]:
        config = _write_config(folder, f"pace_{n}.json", {
            **_raw(pretrain), "study": f"pace_{n}", "variants": {
                f"p{i}": {"variant": "bert_a"} for i in range(n)}})
        jobs += [(f"pace {n} p{i}", _experiment("pretrain", config, [
            "--variants", f"p{i}", "--until-step", until]), after([j[0] for j in jobs]))
            for i in range(n)]  # timed alone: each round after the one before
    paces = [label for label, _, _ in jobs]
    for task in then["tasks"]:
        config = _write_config(folder, f"finetune_{task}.json", {
            **_raw(then), "study": f"finetune_{task}", "pretrain_configs": ["pace_1.json"],
            "variants": ["p0"], "checkpoints": [0.0], "checkpoint_variants": {"0.0": ["p0"]},
            "tasks": [task], "learning_rates": then["learning_rates"][:1], "seeds": [0, 1],
            "selection_seed": None, "edge_learning_rates": [],
            "task_settings": {task: {"max_train_examples": TINY["examples"] if tiny else 2000}},
            "settings": {**then["settings"], "epochs": 1, "pad_each_batch": False}})
        jobs.append((f"finetune {task}", _experiment("finetune", config, []), after(paces)))
    jobs.append(("gradients", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "tests/layers/test_fused_gradients.py"], after(paces)))
    return jobs + [("summary", [sys.executable, "-m", "experiments.calibrate", work],
                    after([label for label, _, _ in jobs]))]


def _planned_jobs(spec, tiny, work, pretrain, then, stage):
    """A planned window (W1). Its first call: the benchmark headline (unless its record is
    committed: `headline_record`), then the calibration that sets the budget for this call
    and the second (`experiments.budget`), then every variant's seeds pre-trained as one
    program, the variants at once, and each variant's encoders fine-tuned once its grid
    ended. Its second call (`stage["call"]` 2): the second call's plan (`budget.
    plan_second_call`), then the fine-tuning the first left, of the variants whose grids
    finished. No study job starts unless its call's plan says it fits."""
    ended, plan = stage.setdefault("_ended", {}), spec["plan"]
    groups = list(pretrain["variants"])

    def planned():
        return (budget.read_plan(work) or {}).get("plan", {}).get("run")

    def finetune(group, ready, *first):  # a variant's encoders as one program a task
        names = [v.name for v in variants(pretrain) if v.group == group]
        return (f"finetune {group}", [sys.executable, "-m", "experiments.stage", "finetune",
                                      then["_path"], *names, *first], ready)
    if stage.get("call") == 2 and stage["notes"]:  # a fresh machine: nothing goes on
        budget.write_second(work, {"run": False, "call": 2}, stage["notes"], None)
        return []
    if stage.get("call") == 2:
        budget.plan_second_call(work, stage["_stop"], plan["margin"])
        trained = [g for g in groups if all(v.is_finished for v in variants(pretrain)
                                            if v.group == g)]
        return [finetune(group, planned) for group in trained]
    done = headline_record(stage["stage"])  # also at --tiny: the command the card runs
    if done:
        stage["notes"] = stage.get("notes", []) + [f"headline: not measured again, its "
                                                   f"record is committed ({done})"]
    headline = [*load_stages()["benchmark"], *plan["headline"].split()]
    jobs = [] if done else [("benchmark", [
        sys.executable, "-m", *headline, "--out", os.path.join(work, "logs", "benchmark"),
        "--overwrite", *(TINY["benchmark"] if tiny else [])], None)]
    jobs.append(("calibrate", [
        sys.executable, "-m", "experiments.budget", work, "--stop", f"{stage['_stop']:.0f}",
        "--second", "0" if tiny else f"{second_call_seconds():.0f}", "--margin",
        str(plan["margin"]), "--most", "1" if tiny else str(plan["most"])],
        lambda: done or "benchmark" in ended))
    # The grids start with the calibration (their set-up and compile on the host while the
    # card is timed) and train once the plan is written, its steps.
    jobs += [(f"pretrain {group}", [sys.executable, "-m", "experiments.stage", "pretrain",
                                    pretrain["_path"], group, "--plan-of", work],
              lambda: done or "benchmark" in ended) for group in groups]
    # Beside each grid, on the host: its fine-tuning programs, once it wrote an encoder
    # (seed 0's initialization, before its first step), into the shared compilation cache.
    for group in groups:
        names = [v.name for v in variants(pretrain) if v.group == group]
        inits = [job["init"] for job in finetune_plan(then, names)]
        jobs.append((f"compile {group}", [
            sys.executable, "-m", "experiments.stage", "compile", then["_path"], *names,
            "--plan-of", work], lambda inits=inits: planned() and any(map(os.path.isdir, inits))))
    # At --tiny (a CPU of two cores) a variant's fine-tuning also waits for its compile
    # rather than compiling the same programs beside it.
    return jobs + [finetune(group, lambda group=group: planned() and ended.get(
        f"pretrain {group}") and (not tiny or f"compile {group}" in ended), "--first-call-of",
                            work) for group in groups]


def headline_record(name):
    """The committed record of stage `name`'s benchmark headline (any call's), or None."""
    found = sorted(glob.glob(os.path.join(RECORDS, "stages", name, "logs*", "benchmark.json")))
    return found[0] if found else None


def second_call_seconds():
    """Seconds of jobs a planned window's second call gives (stages.json `machine`): the
    window's device time less the machine's start (stated), the first call, the pause
    between the calls, then that call's install and stop."""
    machine = load_stages()["machine"]
    return (machine["window_seconds"] - machine["start_seconds"] - machine["call_seconds"]
            - machine["pause_seconds"] - 15 - machine["install_seconds"] - STOP_RESERVE)


def finetune_together(config, names, command, tasks=None):
    """A planned window's fine-tuning of one variant's encoders (`names`: its seeds; their
    final models and the checkpoints the study names: one architecture, one vocabulary)
    on `tasks` (default: the study's), as one program a task (`run_protocol(together=
    ...)`), each encoder's settings pinned in its record folder as `experiments.run
    finetune` pins them. Only records: the pages are made at home, from them."""
    import keras

    from keras_tupe.finetuning import run_protocol

    chosen, tasks = protocol(config), config["tasks"] if tasks is None else tasks
    jobs = [job for job in finetune_plan(config, names) if any(chosen.runs_to_do(
        records.read_jsonl(os.path.join(job["out"], "results.jsonl")), task)
        for task in tasks)]
    require_models(job["init"] for job in jobs)
    for job in jobs:
        settings = {"init": job["init"], "vocab": job["vocab"], "lowercase": job["lowercase"],
                    "data_dir": config.get("data_dir"), "settings": config["settings"],
                    **{key: config[key] for key in ("task_settings",) if config.get(key)}}
        path = os.path.join(job["out"], SETTINGS_FILE)
        if records.read_json(path) is None:  # a second call's: pinned by the first
            records.write_json(path, {**settings, "init_sha256": tree_sha256(job["init"]),
                                      "command": command, "created": records.now(),
                                      "versions": records.machine()})
    if jobs:
        print(f"[{config['study']}] {len(jobs)} encoders as one program a task: "
              f"{tasks} x lr {config['learning_rates']} x seeds {config['seeds']}", flush=True)
        keras.backend.clear_session()
        run_protocol(tasks, jobs[0]["init"], jobs[0]["out"],
                     together=[(job["init"], job["out"]) for job in jobs[1:]], grid=True,
                     protocol=chosen, vocab=jobs[0]["vocab"], lowercase=jobs[0]["lowercase"],
                     data_dir=config.get("data_dir"), task_settings=config.get(
                         "task_settings"), **config["settings"], **config["grid"])


def pretrain_planned(config, group, work, command):
    """A planned window's grid of one variant (`group`: its seeds as one program), started
    beside the calibration: it loads the shards, builds and compiles while the card is
    timed, waits for the plan (`WORK/logs/plan.json`), then trains the plan's steps (the
    prepared config as the calibration rewrote it: `run_grid`'s `plan`), or nothing where
    the plan says so."""
    started = time.time()

    def plan():  # its log says when the grid was ready, and when the plan came
        print(f"{group}: built and compiled in {time.time() - started:.0f} s; waiting for "
              "the plan", flush=True)
        while (record := budget.read_plan(work)) is None:
            time.sleep(1)
        print(f"{group}: the plan after {time.time() - started:.0f} s: " + (
            f"{record['plan']['steps']} steps" if record["plan"].get("run") else "nothing"),
              flush=True)
        return load_config(config["_path"]) if record["plan"].get("run") else None
    ensure_vocabulary(config, command=command)
    run_grid(config, [v for v in variants(config) if v.group == group], command, plan=plan)


def compile_together(config, names, tasks):
    """The programs `finetune_together` will run for one variant (`names`: its seeds) on
    `tasks`, compiled beside its grid (the host is idle while the card pre-trains) into the
    shared compilation cache, which the fine-tuning then loads: each task's grid of every
    encoder's rates x seeds (`compile_protocol`), built from the first of its encoders
    written (seed 0's initialization, before the grid's first step). Writes nothing else."""
    from keras_tupe.finetuning import compile_protocol

    jobs = finetune_plan(config, names)
    start = next((job for job in jobs if os.path.isdir(job["init"])), None)
    if start is None:
        raise StudyError(f"Nothing to compile from: no encoder of {', '.join(names)} is "
                         f"written yet ({jobs[0]['init']} and {len(jobs) - 1} more).")
    settings = config.get("task_settings") or {}
    for task, seconds in compile_protocol(
            tasks, start["init"], len(jobs), protocol=protocol(config), vocab=start["vocab"],
            lowercase=start["lowercase"], data_dir=config.get("data_dir"), task_settings={
                task: value for task, value in settings.items() if task in tasks},
            **config["settings"], **config["grid"]).items():
        print(f"[{config['study']}] {task}: {len(jobs)} encoders' grid compiled in "
              f"{seconds:.1f} s", flush=True)


def _experiment(command, config, extra):
    return [sys.executable, "-m", "experiments.run", command, *config["_flag"], *extra]


def _schedule(jobs, parallel, stop, logs, env, stage, stream):
    """Runs the jobs in the window until `stop` (`window.run`), recording each as it ends
    (an encoder's last log line: its name, sha256 and size) and streaming the records every
    tick; a run killed mid-block is recorded where it stopped."""
    ended, write_records = stage.setdefault("_ended", {}), stage.get("_records", lambda: None)

    def on_end(record, log):
        if record["run"].startswith("encoder ") and record["exit"] == 0:
            with open(log) as f:
                written = json.loads(f.read().strip().splitlines()[-1])
            stage["encoders"][written.pop("encoder")] = written
        stage["processes"].append(record)
        ended[record["run"]] = not record["stopped"]
        if record["stopped"] != "not started":
            print(f"{record['run']}: exit {record['exit']}"
                  f"{' (stopped at the deadline)' if record['stopped'] else ''}", flush=True)

    window.run(jobs, parallel, stop, logs, env, on_end=on_end,
               tick=lambda: (write_records(), stream()), grace=STOP_GRACE)
    write_records()


class Stream:
    """Writes the stage record into `logs` and packs `folders` (`(arcname, folder)`, `logs`
    among them) into `out/records.tar.gz` whenever a file in them changed: written aside,
    then renamed, so a kill at any moment leaves the last whole pack."""

    def __init__(self, out, folders, stage, logs):
        self.out, self.folders, self.stage, self.logs = out, folders, stage, logs
        self.signature = self.text = None

    def __call__(self, force=False):
        text = json.dumps({k: v for k, v in self.stage.items() if not k.startswith("_")},
                          indent=2) + "\n"
        if text != self.text:
            self.text = records.write_text(os.path.join(self.logs, "stage.json"), text) and text
        files = sorted(os.path.join(root, name) for _, folder in self.folders
                       for root, _, names in os.walk(folder) for name in names)
        signature = [(path, os.stat(path).st_mtime_ns, os.stat(path).st_size)
                     for path in files if os.path.exists(path)]
        if signature == self.signature and not force:
            return
        self.signature, partial = signature, os.path.join(self.out, PACK + ".partial")
        with tarfile.open(partial, "w:gz") as archive:
            for arcname, folder in self.folders:
                for root, _, names in os.walk(folder):
                    for name in sorted(filter(_a_record, names)):
                        _pack(archive, os.path.join(root, name), os.path.join(
                            arcname, os.path.relpath(os.path.join(root, name), folder)))
        if os.path.getsize(partial) > load_stages()["machine"]["back_file_bytes"]:
            raise StudyError(f"The records pack to {os.path.getsize(partial) / 2**20:.1f} "
                             "MiB, more than one file that comes back.")
        os.replace(partial, os.path.join(self.out, PACK))


def _a_record(name):
    """Whether a file named `name` in a records folder is sent home: not an output folder's
    lock (`.<name>.lock`, beside each results folder: a writer's), nor a file being written
    (`staging.partial_path`'s `.partial`: never complete, never read)."""
    return not (name.startswith(".") and name.endswith(".lock")) and ".partial" not in name


def _pack(archive, path, arcname):
    """Adds the file at `path`; a JSON-lines record up to its last newline only (a row
    being appended as it is read comes whole with the next pack). One that vanished (a
    record written aside and renamed meanwhile) comes with the next pack."""
    try:
        with open(path, "rb") as f:
            content = f.read()
        info = archive.gettarinfo(path, arcname)
    except FileNotFoundError:
        return
    if path.endswith(".jsonl"):
        content = content[:content.rfind(b"\n") + 1]
    info.size = len(content)
    archive.addfile(info, io.BytesIO(content))


def write_encoder(init, path):
    """A run's masked LM (its final preset or a checkpoint) in bfloat16: one tar of its
    preset folder at `path` (`--out`/encoders/<study>/<name>.tar), written aside then
    renamed; prints its name, sha256 and size, or refuses one past what comes back."""
    import keras_hub

    import keras_tupe.models  # noqa: F401  (registers the classes for loading)

    machine, out = load_stages()["machine"], os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(path))))
    with staged(path) as partial, tempfile.TemporaryDirectory() as folder:
        keras_hub.models.MaskedLM.from_preset(init, dtype="bfloat16").save_to_preset(folder)
        with tarfile.open(partial, "w") as archive:
            archive.add(folder, arcname="preset")
        files = [os.path.join(root, n) for root, _, names in os.walk(out) for n in names]
        if (len(files) > machine["back_files"] or os.path.getsize(partial) > machine[
                "back_file_bytes"] or _bytes(files) > machine["back_bytes"] - 2**21):  # records
            raise StudyError(f"{os.path.basename(path)} would pass the limits of what comes "
                             f"back ({machine['back_files']} files, {machine['back_bytes']} "
                             "bytes): not kept")
    print(json.dumps({"encoder": os.path.relpath(path, out), "sha256": _sha256(path),
                      "bytes": os.path.getsize(path)}), flush=True)


def read_encoder(path, init, vocab=None):
    """The masked LM that `write_encoder` brought home (its `.tar`, or the `.tar.xz` that
    `prepare` carries) as a float32 preset folder at `init`, and its vocabulary at `vocab`."""
    with tempfile.TemporaryDirectory() as folder:
        with tarfile.open(path, "r:xz" if path.endswith(".xz") else "r:") as archive:
            # a damaged file fails here, before Keras loads
            archive.extractall(folder, filter="data")
        import keras_hub

        import keras_tupe.models  # noqa: F401  (registers the classes for loading)
        from keras_tupe.models.preset_folders import write_preset_folder

        preset = os.path.join(folder, "preset")
        model = keras_hub.models.MaskedLM.from_preset(preset, dtype="float32")
        write_preset_folder(model, init, "keras_tupe_encoder", {
            "from": os.path.basename(path), "sha256": _sha256(path),
            "dtype": "bfloat16, cast back"})
        if vocab and not os.path.exists(vocab):
            shutil.copy(os.path.join(preset, "assets", "tokenizer", "vocabulary.txt"), vocab)


def _sha256(path):
    """The file's sha256 (a carried `.tar.xz`: its `.tar`'s, as recorded)."""
    return file_sha256(path, opener=lzma.open if path.endswith(".xz") else open)


def _chosen(spec, pretrain):
    """The stage's pre-training variants: its `variants`, else every one of the study."""
    return [v for v in variants(pretrain) if v.name in (spec.get("variants") or [v.name])]


def _finetune_jobs(spec, pretrain, then):
    names = [v.name for v in _chosen(spec, pretrain)]
    return [job for job in finetune_plan(then) if job["variant"] in names] if (
        then and then["kind"] == "finetune") else []


def _recorded_elsewhere(pretrain, then, chosen, carried):
    """Refuses a stage whose fine-tuning or length study would wait for what cannot come: a
    run recorded in an earlier window (so skipped) with neither its run folder nor its
    final encoder here."""
    names = [v.name for v in chosen if then and not os.path.isdir(v.run_dir) and os.path.exists(
        records.record_dir(pretrain, v.name, records.RUN_RECORD)) and not _carried(
        carried, _encoder_name(pretrain["study"], v.name, pretrain["settings"]["steps"]))]
    if names:
        raise StudyError(
            f"{pretrain['study']}: {', '.join(names)} pre-trained in an earlier window (their "
            f"records are in {records.record_dir(pretrain)}), and neither their run folders "
            "nor their encoders are here, so their fine-tuning could never start. Give "
            "--encoders FOLDER (what that window brought home), or run the next stage.")


def _encoder_name(study, variant, step):
    return os.path.join(study, f"{variant}__step{step:07d}.tar")


def _carried(folder, name):
    """The path of encoder `name` in `folder` (carried `.tar` or `.tar.xz`), or None."""
    return next((path for path in (os.path.join(folder, name), os.path.join(
        folder, name + ".xz")) if os.path.exists(path)), None) if folder else None


# === collect (here) ===

def collect(name, folder, results_dir=RESULTS):
    """Files what came back (`folder`'s records pack) under `results_dir/records/` (the logs
    under `stages/NAME/`, a call's own folder: `call_logs`), once all of it is checked:
    refuses, in one line naming the file, a pack that is not whole (`_read_pack`), another
    stage's, a rehearsal's (`--tiny`) among the records of `RESULTS`, or a record that would
    replace one that differs; takes a `.jsonl` record that grew, and leaves one with the same
    bytes (or, a `.jsonl`, that holds them and a later call's rows) untouched. A call killed
    before its end is recorded so, beside its stage record (`_killed`). Writes nothing
    unless every check passed, and then every file or none (`_write_all`). Returns the
    files written."""
    path = os.path.join(folder, PACK)
    if not os.path.exists(path):
        raise StudyError(f"{folder} holds no {PACK}: nothing came back from stage {name}.")
    files = _read_pack(path)
    stage = json.loads(files[STAGE_RECORD])
    if stage.get("stage") != name:
        raise StudyError(f"{path} is stage {stage.get('stage')}'s pack, not {name}'s: collect "
                         f"it as `collect {stage.get('stage')} {folder}`.")
    if (stage.get("tiny") and os.path.realpath(results_dir) == os.path.realpath(RESULTS)):
        raise StudyError(f"{path} is a --tiny rehearsal's pack ({STAGE_RECORD}: \"tiny\": "
                         f"true): never filed among stage {name}'s records in {RESULTS}; give "
                         "--results-dir a folder of its own to look at it.")
    killed = _killed(stage, files)
    if killed:  # beside the stage record, which is filed as it came
        files[KILLED] = (json.dumps(killed, indent=2) + "\n").encode()
    target, written = os.path.join(results_dir, "records"), []
    logs = call_logs(target, name, stage.get("started"))
    for member, content in files.items():
        where = collected_path(target, name, member, logs)
        here = open(where, "rb").read() if os.path.exists(where) else None
        if here == content or (where.endswith(".jsonl") and here is not None
                               and here.startswith(content)):
            continue  # collected already (a .jsonl: and a later call's rows)
        if here is not None and not (where.endswith(".jsonl") and content.startswith(here)):
            raise StudyError(f"{where} exists with other content: move it away first "
                             f"(stage {name} brought another version back).")
        written.append((where, content))
    _write_all(written, results_dir)
    if killed and written:
        print(f"stage {name}: {killed['killed']}", flush=True)
    return [where for where, _ in written]


STAGE_RECORD = "logs/stage.json"  # the stage record, as packed
KILLED = "logs/killed.json"  # what `collect` adds beside it for a call killed before its end


def _read_pack(path):
    """`{member: bytes}`: every file of the records pack at `path`, read to its end, each
    JSON file parsed whole and each JSON-lines file line by line to its last newline, and
    the stage record among them; anything less (a cut archive, a half-written plan, a cut
    last row) refused in one line naming the file."""
    with open(path, "rb") as f:  # one this process cannot read: the OSError's own line
        packed = f.read()
    try:  # the whole stream, its length and CRC too (tarfile stops at the archive's end)
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(packed)), mode="r:") as archive:
            files = {m.name: archive.extractfile(m).read() for m in archive if m.isfile()}
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise StudyError(f"{path} is not a whole archive ({type(error).__name__}: {error}): "
                         "cut or damaged on its way here; fetch it again. Nothing filed.")
    for member, content in files.items():
        if member.endswith(".json"):
            _parses(path, member, content)
        elif member.endswith(".jsonl"):
            rows = content.split(b"\n")
            if rows[-1]:
                raise StudyError(f"{path}: {member} is cut: its last line (line {len(rows)}) "
                                 "ends without a newline; fetch the pack again. Nothing filed.")
            for number, row in enumerate(rows[:-1], 1):
                if row.strip():
                    _parses(path, f"{member} line {number}", row)
    if STAGE_RECORD not in files:
        raise StudyError(f"{path} holds no {STAGE_RECORD}: not a stage's records pack. "
                         "Nothing filed.")
    return files


def _parses(path, what, content):
    try:
        json.loads(content)
    except ValueError as error:  # a JSONDecodeError, or bytes that are not text
        raise StudyError(f"{path}: {what} does not parse whole ({error}): cut or half-written; "
                         "fetch the pack again. Nothing filed.") from None


def _killed(stage, files):
    """`{"killed", "running"}` for a call killed before its end, else None: `run` adds
    `seconds` to the stage record as it ends, so a record without them is one streamed
    before that (a kill: the call's timeout_s, the machine gone). The jobs with a log but
    no end in `processes` were running then."""
    if "seconds" in stage:
        return None
    ended = {p["run"].replace(" ", "_") for p in stage.get("processes", [])}  # as logs are named
    logs = (member[len("logs/"):-len(".log")] for member in files
            if member.startswith("logs/") and member.endswith(".log"))
    running = sorted(log for log in logs if log not in ended)
    return {"killed": "killed before its end (its stage record has no \"seconds\": the last "
                      f"one streamed); running then: {', '.join(running) or 'no job'}",
            "running": running}


def _write_all(written, results_dir):
    """Writes every `(path, content)` (under `results_dir`) or none: each into a temporary
    folder first and the folders they go to made, then each renamed into place; a write
    that fails before the renames (a full disk, a file where a folder goes) removes what it
    wrote and the folders it made."""
    if not written:
        return
    scratch, made = tempfile.mkdtemp(prefix=".collect_", dir=existing_ancestor(results_dir)), []
    try:
        for index, (where, content) in enumerate(written):
            with open(os.path.join(scratch, str(index)), "wb") as f:
                f.write(content)
            _make_folders(os.path.dirname(where), made)
        for index, (where, _) in enumerate(written):
            os.replace(os.path.join(scratch, str(index)), where)
    except OSError:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _make_folders(folder, made):
    """Makes `folder` and its missing parents, each appended to `made` once made."""
    if folder and not os.path.isdir(folder):  # "": the working folder
        _make_folders(os.path.dirname(folder), made)
        os.mkdir(folder)
        made.append(folder)


def call_logs(target, name, started):
    """The folder under `target/stages/NAME/` a call's logs go to: `logs`, else `logs_2`,
    `logs_3`, ...: the first that is free or holds this call's (its stage record says it
    `started` at the same time), so each call of a window keeps its own and a second
    `collect` of one call finds the same folder."""
    for index in range(1, 100):
        logs = "logs" if index == 1 else f"logs_{index}"
        here = records.read_json(os.path.join(target, "stages", name, logs, "stage.json"))
        if here is None or here.get("started") == started:
            return logs
    raise StudyError(f"{os.path.join(target, 'stages', name)}: 99 calls' logs already")


def collected_path(target, name, member, logs="logs"):
    """Where `collect` puts pack member `member` of stage `name` under `target` (the
    records folder): a study's record under its study, the logs (of the call whose folder
    is `logs`) under `stages/NAME/`."""
    if member.startswith("logs/"):
        return os.path.join(target, "stages", name, logs, member[len("logs/"):])
    return os.path.join(target, member)


def main(argv=None):
    def _main(argv):
        parser = argparse.ArgumentParser(prog="python -m experiments.stage", description=__doc__,
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
        one_line_errors(parser)
        commands = parser.add_subparsers(dest="command", required=True)
        here, there, back, encoder, together, ahead, grid = (
            commands.add_parser(command) for command in (
                "prepare", "run", "collect", "encoder", "finetune", "compile", "pretrain"))
        # run's own: encoder (one in bfloat16), finetune (a planned window's variant, its
        # encoders as one program), compile (that program, beside the variant's grid),
        # pretrain (a planned window's grid, built beside the calibration)
        grid.add_argument("config", help="the planned window's pre-training config")
        grid.add_argument("variant", help="the variant whose seeds train as one program")
        grid.add_argument("--plan-of", metavar="WORK", required=True,
                          help="train once WORK/logs/plan.json is written, its steps")
        for sub in (together, ahead):
            sub.add_argument("config", help="the planned window's fine-tuning config")
            sub.add_argument("variants", nargs="+", help="one variant's runs (its seeds)")
        together.add_argument("--first-call-of", metavar="WORK", help="only the tasks the "
                              "first call's plan (WORK/logs/plan.json) gives it")
        ahead.add_argument("--plan-of", metavar="WORK", required=True,
                           help="every task of the plan in WORK/logs/plan.json")
        for sub in (here, there, back):
            sub.add_argument("stage")
        for sub in (here, there):
            sub.add_argument("--tiny", action="store_true", help="the tiny rehearsal")
            sub.add_argument("--encoders", help="the encoders folder an earlier call brought home")
        there.add_argument("--out", default=os.environ.get("OUT", "stage_out"))
        there.add_argument("--started", type=float, help="when the command started (epoch s)")
        there.add_argument("--deadline", type=float, help="seconds after --started")
        there.add_argument("--call", type=int, choices=(1, 2), default=1,
                           help="a planned window's call: 2 goes on from the first's")
        back.add_argument("folder", help="what came back")
        back.add_argument("--results-dir", default=RESULTS, help="where the records are "
                          "filed (under records/); a rehearsal's only elsewhere")
        encoder.add_argument("init", help="a run's final preset or checkpoint")
        encoder.add_argument("path")
        args = parser.parse_args(argv)
        if args.command == "prepare":
            print("\n".join(prepare(args.stage, args.tiny, encoders=args.encoders)))
        elif args.command == "run":
            run(args.stage, args.out, args.tiny, args.deadline, args.started,
                encoders=args.encoders, call=args.call)
        elif args.command == "encoder":
            write_encoder(args.init, args.path)
        elif args.command == "pretrain":
            pretrain_planned(load_config(args.config), args.variant, args.plan_of,
                             records.command_line(argv if argv is not None else sys.argv[1:],
                                                  "python -m experiments.stage"))
        elif args.command == "compile":
            compile_together(load_config(args.config), args.variants,
                             budget.read_plan(args.plan_of)["plan"]["tasks"])
        elif args.command == "finetune":
            finetune_together(load_config(args.config), args.variants, records.command_line(
                argv if argv is not None else sys.argv[1:], "python -m experiments.stage"),
                args.first_call_of and budget.read_plan(args.first_call_of)["plan"][
                    "first_call_tasks"])
        else:
            written = collect(args.stage, args.folder, args.results_dir)
            print(*(f"wrote {path}" for path in written), "next: python -m experiments.run "
                  "report" if written else "nothing new: every record there is here already",
                  sep="\n")
        return 0
    quiet_start()  # before a run imports Keras: TensorFlow quiet, Ctrl-C one line
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())

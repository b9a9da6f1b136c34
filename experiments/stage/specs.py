"""What the stage's steps share: the stages (stages.json) and their configs, the tiny
rehearsal's sizes, the names and checks of the encoders a stage carries, and the card's pace
a stage is planned at (S0's calibration, W1's calibration record)."""

import glob
import json
import lzma
import math
import os
import time

from experiments import records
from experiments.config import StudyError, load_config, variants
from experiments.plans import finetune_plan
from experiments.stage import budget
from keras_tupe_base.files import file_sha256


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
        raw = raw_config(pretrain)
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
        pretrain = write_config(work, "pretrain.json", raw)
    if copied and then and work:
        raw = {**raw_config(then), "pretrain_configs": ["pretrain.json"]}
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
        then = write_config(work, then["kind"] + ".json", raw)
    return pretrain, then


def raw_config(config):
    """A loaded config as a study entry again (a pre-training `base` is resolved into it)."""
    base = ("base", "references", "seed", "overrides") if config["kind"] == "pretrain" else ()
    return {k: v for k, v in config.items()
            if not k.startswith("_") and k not in ("ceiling", *base)}


def write_config(folder, name, raw):
    raw.update(runs_dir=os.path.join(folder, "runs"), results_dir=os.path.join(folder, "results"))
    return load_config(records.write_json(os.path.join(folder, name), raw))


def bytes_of(paths):
    return sum(os.path.getsize(path) for path in paths if os.path.isfile(path))


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


def check_calibration_fits(name, spec, tiny, deadline, started):
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


def encoder_sha256(path):
    """The file's sha256 (a carried `.tar.xz`: its `.tar`'s, as recorded)."""
    return file_sha256(path, opener=lzma.open if path.endswith(".xz") else open)


def chosen_variants(spec, pretrain):
    """The stage's pre-training variants: its `variants`, else every one of the study."""
    return [v for v in variants(pretrain) if v.name in (spec.get("variants") or [v.name])]


def finetune_jobs(spec, pretrain, then):
    names = [v.name for v in chosen_variants(spec, pretrain)]
    return [job for job in finetune_plan(then) if job["variant"] in names] if (
        then and then["kind"] == "finetune") else []


def encoder_name(study, variant, step):
    return os.path.join(study, f"{variant}__step{step:07d}.tar")


def carried_path(folder, name):
    """The path of encoder `name` in `folder` (carried `.tar` or `.tar.xz`), or None."""
    return next((path for path in (os.path.join(folder, name), os.path.join(
        folder, name + ".xz")) if os.path.exists(path)), None) if folder else None

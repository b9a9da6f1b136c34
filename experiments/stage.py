"""GPU stages: prepared here, run in one lent GPU window, every record streamed home.

    .venv/bin/python -m experiments.stage prepare S1 [--tiny]   # here: .stage/S1/, the command
    <the command prepare printed>                               # there, carrying .stage/S1
    .venv/bin/python -m experiments.stage collect S1 FILES_AT   # here: the records, then report

A stage (`stages.json`) pre-trains a study's variants at once and fine-tunes (or scores at
longer lengths) what they trained, each checkpoint as soon as it exists; or runs one
benchmark command; or, S0, calibrates the card. `prepare` refuses a stage that would not fit
before it does any work, then writes what the lent machine lacks (token-id shards, the
vocabulary, GLUE or SQuAD files, the length study's batches, the wheels) and prints the one
command to run there. `run` counts `--deadline` from `--started` (the command's start, the
install included), streams every record into `--out` as it is written (a kill at any moment
returns all that finished before it), stops every process before the deadline (a stopped
pre-training run is recorded where it stopped) and brings the trained encoders back in
bfloat16 with their sha256. `--tiny`: the same stage at the tiny size (`make test-stage`).
"""

import argparse
import glob
import hashlib
import io
import json
import lzma
import math
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time

from experiments import records
from experiments.config import StudyError, load_config

HERE = os.path.dirname(os.path.abspath(__file__))
STAGES_FILE = os.path.join(HERE, "stages.json")
IMAGE_FILE = os.path.join(HERE, "gpu_image.txt")
STAGE_DIR = ".stage"
# S0's calibration: made on this machine in the same window, else the record that came back.
CALIBRATIONS = (os.path.join(STAGE_DIR, "S0", "work", "logs", "calibration.json"),
                os.path.join("docs", "results", "records", "stages", "S0", "logs",
                             "calibration.json"))
PACK, ENCODERS = "records.tar.gz", "encoders"
# Seconds before the deadline: the processes get SIGTERM, then SIGKILL after the grace;
# then the last records are written and packed.
STOP_GRACE, STOP_RESERVE = 8, 20
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
        "examples": 24, "tasks": 2, "squad_articles": 5, "squad_questions": 6}


def load_stages():
    with open(STAGES_FILE) as f:
        return json.load(f)


def stage_spec(name):
    stages = load_stages()
    if name not in stages["stages"]:
        raise StudyError(f"Unknown stage {name!r}. Valid: {', '.join(stages['stages'])}.")
    spec = dict(stages["stages"][name])
    if "like" in spec:  # S3, S4: S1 with other studies
        spec = {**stages["stages"][spec["like"]], **spec}
    if "benchmark" in spec:
        spec["command"] = stages["benchmark"] + spec["benchmark"].split()
    return spec


def stage_configs(spec, tiny=False, work=None):
    """The stage's `(pretrain, then)` configs (either may be None; `then`: its fine-tuning
    or length study); with `tiny`, copies at the tiny size written into `work`."""
    configs = [spec.get(key) and load_config(spec[key]) for key in ("pretrain", _then(spec))]
    return _tiny_configs(*configs, work=work) if tiny else configs


def _then(spec):
    return "length" if "length" in spec else "finetune"


def _tiny_configs(pretrain, then, work):
    os.makedirs(work, exist_ok=True)
    written, where = {}, {"runs_dir": os.path.join(work, "runs"),
                          "results_dir": os.path.join(work, "results")}
    if pretrain:
        raw = {k: v for k, v in pretrain.items() if not k.startswith("_") and k not in (
            "base", "references", "seed", "overrides")}
        raw.update(where, kind="pretrain", size="tiny", vocabulary={
            **raw["vocabulary"], **TINY["vocabulary"], "file": os.path.join(work, "vocab.txt")})
        raw["settings"] = {**raw["settings"], **TINY["pretrain"],
                           "shards": os.path.join(work, "shards", "train"),
                           "valid_shards": os.path.join(work, "shards", "valid")}
        written["pretrain"] = records.write_json(os.path.join(work, "pretrain.json"), raw)
    if then:
        raw = {k: v for k, v in then.items() if not k.startswith("_") and k != "ceiling"}
        raw.update(where, pretrain_configs=["pretrain.json"])
        if then["kind"] == "length":
            raw.update(TINY["length"])
        else:
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
        written["then"] = records.write_json(os.path.join(work, then["kind"] + ".json"), raw)
    return [written.get(key) and load_config(written[key]) for key in ("pretrain", "then")]


# === prepare (here) ===

def prepare(name, tiny=False, dest=STAGE_DIR, encoders=None):
    """Checks that the stage fits, then writes `dest/NAME[_tiny]/`; returns the lines that
    say what travels and, last, the command to run there. `encoders`: the folder an
    earlier call brought home (`ENCODERS`); they travel xz-compressed, and a stage whose
    every final encoder is there carries no token-id shards: it only fine-tunes."""
    spec, machine = stage_spec(name), load_stages()["machine"]
    brought = _carried_encoders(name, spec, tiny, encoders) if encoders else {}
    if not tiny and "calibrate" not in spec:  # S0's runs are scratch runs of its own
        pretrain, then = stage_configs(spec)
        if pretrain:
            _recorded_elsewhere(pretrain, then, _chosen(spec, pretrain), encoders)
    lines = [] if tiny else estimate(name, spec)  # refuses before any work
    folder = os.path.join(dest, name + ("_tiny" if tiny else ""))
    staging = folder + ".partial"
    shutil.rmtree(staging, ignore_errors=True)  # only ever this command's own leftover
    os.makedirs(staging)
    pretrain, then = stage_configs(spec, tiny, os.path.join(staging, "work"))
    data = {}
    if pretrain:
        data.update(_prepare_pretraining(pretrain, spec, staging, tiny,
                                         shards=not brought.get("all")))
    for relative, path in brought.get("files", {}).items():
        os.makedirs(os.path.dirname(os.path.join(staging, ENCODERS, relative)), exist_ok=True)
        with open(path, "rb") as source, lzma.open(
                os.path.join(staging, ENCODERS, relative + ".xz"), "wb") as target:
            shutil.copyfileobj(source, target)
    if then and then["kind"] == "length":
        from experiments.length_study import write_prepared

        write_prepared(then, os.path.join(staging, "length"))
        data["length"] = os.path.join(staging, "length")
    elif then:
        data.update(_prepare_finetune_data(stage_configs(spec)[1], staging, tiny))
    with tarfile.open(os.path.join(staging, "data.tar.xz"), "w:xz") as archive:
        for part, path in data.items():  # token ids compress to about half
            archive.add(path, arcname=part)
    for path in data.values():
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    _download_wheels(load_stages()["wheels"], os.path.join(staging, "wheels"))
    if os.path.exists(folder):
        shutil.rmtree(folder)  # the previous preparation of this stage: made again whole
    os.rename(staging, folder)
    carried, tree = _size(folder), _tree_size()
    lines.append(f"{folder}: {carried / 2**20:.1f} MiB; working tree {tree / 2**20:.1f} MiB; "
                 f"travels {(carried + tree) / 2**20:.1f} of {machine['carry_bytes'] / 2**20:.0f}")
    if carried + tree > machine["carry_bytes"]:
        shutil.rmtree(folder)
        raise StudyError(f"Stage {name} does not fit: {(carried + tree) / 2**20:.1f} MiB would "
                         f"travel, the limit is {machine['carry_bytes'] / 2**20:.0f} MiB.")
    if brought:
        lines.append(f"carried encoders: {len(brought['files'])} (sha256 as recorded), "
                     + ("every final one: no pre-training, no shards" if brought["all"]
                        else "the other variants pre-train"))
    return lines + [f"command (carry {folder}; --deadline: the call's timeout_s less 15): "
                    + device_command(name, folder, tiny, machine["call_seconds"] - 15,
                                     bool(brought))]


def device_command(name, folder, tiny, deadline, encoders=False):
    """The one command for the lent machine: the clock starts before the install."""
    site = "${TMPDIR:-/tmp}/stage_site"
    return (f"T0=$(date +%s); python3 -m pip install -q --no-index --no-deps --no-compile "
            f"--upgrade --target {site} {folder}/wheels/*.whl && PYTHONPATH={site} "
            f"KERAS_BACKEND=jax python3 -m experiments.stage run {name}"
            f"{' --tiny' if tiny else ''} --started $T0 --deadline {deadline} --out $OUT"
            f"{f' --encoders {folder}/{ENCODERS}' if encoders else ''}")


def _carried_encoders(name, spec, tiny, folder):
    """The encoders of `folder` (what a call brought home) that the stage fine-tunes,
    each checked against the sha256 its stage record holds (`stages/NAME/logs/stage.json`
    among the committed records, but for a rehearsal, and beside `folder`): `{"files": {relative: path}, "all":
    every chosen variant's final encoder is there}`; refuses a folder with none of them,
    or one whose file differs from its record."""
    import tempfile

    from experiments.finetune_study import plan

    with tempfile.TemporaryDirectory() as work:  # the names alone: nothing is kept
        pretrain, then = stage_configs(spec, tiny, work)
        names = [v.name for v in _chosen(spec, pretrain)]
        jobs = [job for job in plan(then) if job["variant"] in names] if (
            then and then["kind"] == "finetune") else []
    recorded = {}  # the committed record is the full-size stage's: not a rehearsal's
    for path in ([] if tiny else [os.path.join("docs", "results", "records", "stages", name,
                                               "logs", "stage.json")]) + [
                 os.path.join(os.path.dirname(os.path.abspath(folder)), "logs", "stage.json")]:
        for key, value in records.read_json(path, {}).get("encoders", {}).items():
            recorded[os.path.relpath(key, ENCODERS)] = value["sha256"]
    files = {}
    for job in jobs:
        path = os.path.join(folder, _encoder_name(job))
        if not os.path.exists(path):
            continue
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        if recorded.get(_encoder_name(job), digest) != digest:
            raise StudyError(f"{path}: its sha256 {digest} is not the one its stage record "
                             f"holds ({recorded[_encoder_name(job)]}): not carried.")
        files[_encoder_name(job)] = path
    if not files:
        wanted = ", ".join(_encoder_name(job) for job in jobs) or "none: it fine-tunes nothing"
        raise StudyError(f"{folder}: none of stage {name}'s encoders is there (looked for "
                         f"{wanted}).")
    final = {_encoder_name(job) for job in jobs if job["step"] == pretrain["settings"]["steps"]}
    return {"files": files, "all": final <= set(files)}


def estimate(name, spec, pace=None, configs=None):
    """The stage's time on the card, with its basis (`pace`: `gpu_pace()`'s); refuses a
    stage that would not fit: its pre-training and a first fine-tuning run of each final
    encoder (every run's record comes home as it ends). The fine-tuning past the call's end
    is said, not refused: it goes on in a later call from the encoders that came home."""
    machine, pace = load_stages()["machine"], pace or gpu_pace()
    limit = machine["call_seconds"] - STOP_RESERVE - pace["install_seconds"]
    lines = []
    needed, what = 0, "no benchmark rows"
    if "command" in spec or spec.get("calibrate", {}).get("benchmark"):
        from benchmarks.encoders.cli import parse_args

        command = spec.get("command") or (load_stages()["benchmark"]
                                          + spec["calibrate"]["benchmark"].split())
        args = parse_args(command[1:])
        rows = (len(set(args.variants)) * len(set(args.precisions)) * len(set(args.seq_lens))
                * (2 if args.flash == "both" else 1))
        needed = sum(rows * pace["benchmark_row_seconds"][mode] for mode in set(args.modes))
        what = f"{rows * len(set(args.modes))} benchmark rows"
    if "calibrate" in spec:  # each round and the fine-tuning: a start and a few blocks
        calibrate, pretrain = spec["calibrate"], (configs or stage_configs(spec))[0]
        rounds = len(calibrate["processes"])
        needed += (rounds + 1) * pace["finetune_start_seconds"] + rounds * calibrate[
            "blocks"] * pretrain["settings"]["eval_every"] * pace["pretrain_step_seconds"]
        what = f"{rounds} pre-training rounds, fine-tuning, {what}"
    elif "command" not in spec:
        pretrain, then = configs or stage_configs(spec)
        runs = len(spec.get("variants") or pretrain["variants"])
        steps = pretrain["settings"]["steps"]
        needed = -(-runs // pace["at_once"]) * steps * pace["pretrain_step_seconds"]
        what = f"{runs} pre-training runs of {steps} steps, {pace['at_once']} at once"
        if then and then["kind"] == "finetune" and not then.get("squad_file"):
            from experiments.finetune_study import plan

            tasks, runs_per_task = _finetune_steps(then)  # its protocol on one encoder
            task = then["tasks"][0]
            run = tasks[task] // runs_per_task  # records stream home run by run
            task_pace = pace.get("finetune_task_step_seconds", {}).get(
                task, pace["finetune_step_seconds"])
            needed += run * task_pace + pace["finetune_start_seconds"]
            what += f", then a first {task} run on each final encoder at once ({run} steps)"
            jobs, total = len(plan(then)), sum(tasks.values())
            lines.append(f"{name} fine-tuning in all: {jobs} encoders x {total} steps, about "
                         f"{jobs * total * pace['finetune_step_seconds'] / pace['at_once']:.0f}"
                         f" s at {pace['at_once']} at once, beside and after pre-training; "
                         "what a call does not finish goes on from the encoders it brought home")
    line = (f"{name}: {what}: about {needed:.0f} s of {limit:.0f} s (the call's "
            f"{machine['call_seconds']} s less the install and the stop); basis: {pace['basis']}")
    if needed > limit:
        raise StudyError(f"Stage {name} does not fit: {line}. Split it.")
    return [line, *lines]


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
    times = []
    for path in glob.glob(os.path.join("docs", "results", "records", "*", "*",
                                       "run_config.json")):
        run = records.read_json(path)
        if "gpu" in run.get("versions", {}).get("machine", "") and run.get("last_step"):
            times.append(run["wall_seconds"] / run["last_step"])
    if not times:
        raise StudyError("No recorded GPU run to time a stage by (docs/results/records).")
    step = max(times)
    return {"pretrain_step_seconds": step, "at_once": 4, "calibrated": False, "finetune_step_seconds": step,
            "finetune_start_seconds": 60, "benchmark_row_seconds": {"train": 60, "infer": 25},
            "install_seconds": 15,
            "basis": f"the recorded GPU pre-training runs ({step * 1000:.1f} ms a step, four "
                     "at once); fine-tuning a step as a pre-training step (same batch, no "
                     "masked-LM output), 60 s to start and compile, a benchmark row 60 s to "
                     "train (a fresh process: start, compile, timed steps), 25 s to infer: "
                     "estimates until S0's calibration comes back"}


def _finetune_steps(config):
    """Per task, the steps of its protocol on one encoder (with a selection seed: each rate
    with it, then the other seeds at the chosen rate; no edge widened), and its runs."""
    from keras_tupe.data.glue import get_task

    steps, settings = {}, config["settings"]
    runs = (len(config["learning_rates"]) + len(config["seeds"]) - 1
            if config.get("selection_seed") is not None
            else len(config["learning_rates"]) * len(config["seeds"]))
    for name in config["tasks"]:
        task = get_task(name)
        cap = (config.get("task_settings") or {}).get(name, {}).get("max_train_examples")
        with open(os.path.join(config["data_dir"], task.directory, task.split_files["train"]),
                  encoding="utf-8") as f:
            examples = min(sum(1 for _ in f) - 1, cap or float("inf"))  # less the header
        steps[name] = runs * settings["epochs"] * -(-examples // settings["batch_size"])
    return steps, runs


def _prepare_pretraining(config, spec, staging, tiny, shards=True):
    """The vocabulary and (with `shards`) the token-id shards the study names, made here."""
    from experiments.config import ensure_vocabulary, vocabulary_record_path
    from keras_tupe.data.sharding import shard_corpus

    vocab, settings = config["vocabulary"], config["settings"]
    ensure_vocabulary(config)
    lines = {"train": TINY["examples"] * 20, "valid": TINY["examples"] * 4} if tiny else {}
    for part in ("train", "valid") if shards else ():
        shard_corpus([spec["shards"][part]], vocab["file"], os.path.join(staging, part),
                     settings["seq_len"], lowercase=vocab["lowercase"], max_lines=lines.get(part))
    shutil.copy(vocab["file"], os.path.join(staging, "vocab.txt"))
    shutil.copy(vocabulary_record_path(vocab), os.path.join(staging, "vocab.json"))
    return {f"shards/{part}": os.path.join(staging, part)
            for part in (("train", "valid") if shards else ())} | {
        name: os.path.join(staging, name) for name in ("vocab.txt", "vocab.json")}


def _prepare_finetune_data(config, staging, tiny):
    """Each GLUE task's train and dev files (the first examples at `--tiny`), or the SQuAD
    file (at `--tiny`, the first paragraph of its first articles)."""
    from keras_tupe.data.glue import get_task

    if config.get("squad_file"):
        squad = records.read_json(config["squad_file"])
        if tiny:
            squad["data"] = [{**a, "paragraphs": [{**a["paragraphs"][0], "qas": a[
                "paragraphs"][0]["qas"][:TINY["squad_questions"]]}]}
                for a in squad["data"][:TINY["squad_articles"]]]
        return {"squad/squad.json": records.write_json(os.path.join(staging, "squad.json"),
                                                       squad)}
    for name in config["tasks"]:
        task = get_task(name)
        os.makedirs(os.path.join(staging, "glue", task.directory), exist_ok=True)
        cap = (config.get("task_settings") or {}).get(name, {}).get("max_train_examples")
        for split in ("train", *task.eval_splits):
            lines = TINY["examples"] if tiny else (cap if split == "train" else None)
            file = task.split_files[split]
            with open(os.path.join(config["data_dir"], task.directory, file),
                      encoding="utf-8") as source:
                kept = [line for index, line in enumerate(source)
                        if lines is None or index <= lines]  # the header, then the examples
            records.write_text(os.path.join(staging, "glue", task.directory, file),
                               "".join(kept))
    return {"glue": os.path.join(staging, "glue")}


def _download_wheels(names, folder):
    """Wheels for the lent machine's Python 3.12, of the versions installed here."""
    from importlib.metadata import version

    platforms = [f"--platform=manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--only-binary=:all:", "--python-version=3.12", "--implementation=cp",
                    *platforms, "--platform=manylinux2014_x86_64", "-d", folder,
                    *(f"{name}=={version(name)}" for name in names)], check=True)


def _size(folder):
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(folder) for name in names)


def _tree_size():
    """Bytes of the tracked and untracked-not-ignored files: what travels besides a carry."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=True).stdout.split(b"\0")
    return sum(os.path.getsize(n) for n in names if n and os.path.isfile(n))


# === run (there) ===

PHASES = ("pretrain", "finetune", "length")
MIN_RUN_SECONDS = 30  # less than this after the install: no run could end, so none starts


def run(name, out, tiny=False, deadline=None, started=None, folder=None, phases=PHASES,
        parallel=None, encoders=None):
    """Runs the stage's `phases` until `deadline` seconds after `started` (epoch seconds,
    default now), streaming its records into `out`; `encoders`: a folder of what an earlier
    call brought home (`ENCODERS`), fine-tuned without pre-training again. Returns the
    stage record."""
    machine, spec = load_stages()["machine"], stage_spec(name)
    started = started or time.time()
    deadline = deadline or machine["call_seconds"] - 15
    stop = started + deadline - STOP_RESERVE
    if stop - time.time() < MIN_RUN_SECONDS:
        raise StudyError(f"--deadline {deadline:g} s from --started leaves "
                         f"{stop - time.time():.0f} s once the install ({time.time() - started:.0f}"
                         f" s so far) and the stop ({STOP_RESERVE} s) are counted: a run needs "
                         f"{MIN_RUN_SECONDS} s. Give a longer --deadline.")
    folder = folder or os.path.join(STAGE_DIR, name + ("_tiny" if tiny else ""))
    # Before anything imports Keras: a fresh HOME has no keras.json, and Keras's default
    # backend is TensorFlow, which the lent machine lacks.
    os.environ.setdefault("KERAS_BACKEND", "jax")
    _check_packages(folder)
    work = os.path.join(folder, "work")
    if tiny and "pretrain" in phases:  # a rehearsal starts from nothing, as the lent machine
        for made in ("runs", "results", "logs"):
            shutil.rmtree(os.path.join(work, made), ignore_errors=True)
    if not os.path.exists(os.path.join(folder, "vocab.txt")):
        with tarfile.open(os.path.join(folder, "data.tar.xz")) as archive:
            archive.extractall(folder, filter="data")
    pretrain, then = stage_configs(spec, tiny, work)
    logs = os.path.join(work, "logs")
    os.makedirs(os.path.join(out, ENCODERS, pretrain["study"] if pretrain else ""),
                exist_ok=True)
    stage = {"stage": name, "tiny": tiny, "phases": list(phases), "card": _card(),
             "command": records.command_line(sys.argv[1:], "python -m experiments.stage"),
             "versions": records.machine(),
             "pip_list": _pip_list(), "started": records.now(),
             "install_seconds": round(time.time() - started, 1), "processes": [],
             "encoders": {}}
    jobs = _jobs(name, spec, pretrain, then, phases, tiny, work, out, stage, encoders)
    stream = Stream(out, [(c["study"], records.record_dir(c)) for c in (pretrain, then) if c]
                    + [("logs", logs)] + ([stage.pop("stream")] if "stream" in stage else []),
                    stage, logs)
    if pretrain:
        _lay_out(pretrain, then, folder)
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "PYTHONUNBUFFERED": "1",
           "TF_CPP_MIN_LOG_LEVEL": "2",  # one compilation cache for every process
           "JAX_COMPILATION_CACHE_DIR": os.path.abspath(os.path.join(work, "xla_cache")),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    if "calibrate" in spec:  # its rounds need their processes at once
        parallel = max(spec["calibrate"]["processes"])
    elif not parallel:  # as many as served the card best where S0 measured it, and one
        pace = gpu_pace()  # fine-tuning process beside the pre-training runs
        parallel = (max(pace["at_once"], sum(label.startswith("pretrain ") for label, _, _ in
                                             jobs) + 1) if pace["calibrated"] and not tiny
                    else max(1, (os.cpu_count() or 2) // 2))
    stage["parallel"] = parallel
    _schedule(jobs, parallel, stop, logs, env, stage, stream)
    stage["seconds"] = round(time.time() - started, 1)
    stream(force=True)
    print(f"stage {name}: {stage['seconds']:.0f} s; in {out}: "
          f"{', '.join(sorted(os.listdir(out)))}", flush=True)
    return stage


def calibration_jobs(spec, tiny, work, pretrain, then):
    """The S0 processes, `(label, command, ready)`: the pre-training rounds one after the
    other, then fine-tuning (from the first round's step-0 checkpoint) and the gradient
    test, then the benchmark alone, then the summary."""
    folder = os.path.join(work, "calibration")
    ended = {}
    jobs, previous, paces = [], [], []
    for n in spec["processes"]:
        config = _write_config(folder, f"pace_{n}.json", {
            **_raw(pretrain), "study": f"pace_{n}", "variants": {
                f"p{i}": {"variant": "bert_a"} for i in range(n)}})
        until = spec["blocks"] * pretrain["settings"]["eval_every"]
        labels = [f"pace {n} p{i}" for i in range(n)]
        jobs += [(label, _experiment("pretrain", config, ["--variants", f"p{i}", "--until-step",
                                                          str(until)]),
                  lambda after=tuple(previous): _all(ended, after))
                 for i, label in enumerate(labels)]
        previous = labels
        paces += labels  # timed alone: what follows waits for every round
    for task in then["tasks"]:
        examples = TINY["examples"] if tiny else 2000
        config = _write_config(folder, f"finetune_{task}.json", {
            **_raw(then), "study": f"finetune_{task}", "pretrain_configs": ["pace_1.json"],
            "variants": ["p0"], "checkpoints": [0.0], "checkpoint_variants": {"0.0": ["p0"]},
            "tasks": [task], "learning_rates": then["learning_rates"][:1], "seeds": [0, 1],
            "selection_seed": None, "edge_learning_rates": [],
            "task_settings": {task: {"max_train_examples": examples}},
            "settings": {**then["settings"], "epochs": 1, "pad_each_batch": False}})
        jobs.append((f"finetune {task}", _experiment("finetune", config, []),
                     lambda: _all(ended, paces)))
    jobs.append(("gradients", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "tests/test_fused_gradients.py"], lambda: _all(ended, paces)))
    if spec.get("benchmark"):  # alone, after the rest
        others = [label for label, _, _ in jobs]
        command = load_stages()["benchmark"] + spec["benchmark"].split()
        jobs.append(("benchmark", [sys.executable, "-m", *command, "--out",
                                   os.path.join(work, "logs", "benchmark"), "--overwrite",
                                   *(TINY["benchmark"] if tiny else [])],
                     lambda: _all(ended, others)))
    others = [label for label, _, _ in jobs]
    jobs.append(("summary", [sys.executable, "-m", "experiments.calibrate", work],
                 lambda: _all(ended, others)))
    return jobs, ended, os.path.join(folder, "results")


def _raw(config):
    return {k: v for k, v in config.items() if not k.startswith("_") and k not in (
        "base", "references", "seed", "overrides", "ceiling")}


def _write_config(folder, name, raw):
    os.makedirs(folder, exist_ok=True)
    raw.update(runs_dir=os.path.join(folder, "runs"), results_dir=os.path.join(folder, "results"))
    path = os.path.join(folder, name)
    records.write_json(path, raw)
    return load_config(path)


def _all(ended, labels):
    return all(ended.get(label) for label in labels)


def _jobs(name, spec, pretrain, then, phases, tiny, work, out, stage, carried=None):
    """Every process of the stage: `(label, command, ready)`, in priority order; `ready`
    says, once a second, whether it may start now (a checkpoint it needs exists). The
    encoders in `carried` (what `write_encoder` brought home) are laid where their runs
    kept them, and their variants are not pre-trained again."""
    jobs = []
    if "command" in spec:
        jobs.append(("benchmark", [sys.executable, "-m", *spec["command"], "--out",
                                   os.path.join(work, "logs", "benchmark"), "--overwrite",
                                   *(TINY["benchmark"] if tiny else [])], None))
    if "calibrate" in spec:
        calibration, stage["ended"], folder = calibration_jobs(spec["calibrate"], tiny, work,
                                                               pretrain, then)
        stage["stream"] = ("calibration", folder)
        return jobs + calibration
    if not pretrain:
        return jobs
    from experiments import pretrain_study

    chosen = _chosen(spec, pretrain)
    ended = {}  # label -> True once the process ended (the scheduler sets it)
    stage["ended"] = ended
    # Keras's steps_per_execution, a divisor of eval_every and the save steps (5 at --tiny).
    speed = ["--steps-per-execution", str(math.gcd(spec.get("steps_per_execution", 1),
                                                   pretrain["settings"]["eval_every"],
                                                   *pretrain["settings"]["save_steps"]))]
    _recorded_elsewhere(pretrain, then, chosen, carried)
    labels = []  # pre-training that runs here (a variant brought home is not trained again)
    if "pretrain" in phases:
        labels = [f"pretrain {v.name}" for v in chosen if not _carried(carried, os.path.join(
            pretrain["study"], f"{v.name}__step{pretrain['settings']['steps']:07d}.tar"))]
        jobs += [(f"pretrain {v.name}", _experiment("pretrain", pretrain, [
            "--variants", v.name, *speed]), None) for v in chosen if f"pretrain {v.name}" in labels]
    if "length" in phases and then and then["kind"] == "length":
        jobs.append(("length", _experiment("length", then, [
            "--variants", *[v.name for v in chosen]]),
            lambda: all(ended.get(f"pretrain {v.name}") for v in chosen)))
    if "finetune" in phases and then and then["kind"] == "finetune":
        from experiments.finetune_study import plan

        fraction = {round(f * pretrain["settings"]["steps"]): f for f in then["checkpoints"]}
        encoders, tuning = {True: [], False: []}, []
        for job in (j for j in plan(then) if j["variant"] in [v.name for v in chosen]):
            # ready once its checkpoint is written (the final model: once its run ended)
            ready = (lambda init=job["init"], v=job["variant"], final=fraction[job["step"]] == 1:
                     os.path.exists(init) and (not final or f"pretrain {v}" not in labels
                                               or ended.get(f"pretrain {v}")))
            label = f"{job['variant']} step {job['step']}"
            if not _carried(carried, _encoder_name(job)):  # home already: not again
                encoders[fraction[job["step"]] == 1].append((f"encoder {label}", [
                    sys.executable, "-m", "experiments.stage", "encoder", job["init"],
                    os.path.join(out, ENCODERS, _encoder_name(job))], ready))
            tuning.append((f"finetune {label}", _experiment("finetune", then, [
                "--variants", job["variant"], "--checkpoints", repr(fraction[job["step"]]),
                *speed]), ready))
            if _carried(carried, _encoder_name(job)):
                read_encoder(_carried(carried, _encoder_name(job)), job["init"], job["vocab"])
        jobs += encoders[True] + encoders[False] + tuning  # the final encoders first
    seen = {}

    def write_records():  # from the run folders: also a run killed mid-block
        for v in chosen:
            metrics = os.path.join(v.run_dir, "metrics.csv")
            mark = os.path.exists(metrics) and os.stat(metrics).st_mtime_ns, v.is_finished
            if seen.get(v.name) != mark:
                seen[v.name] = mark
                pretrain_study.write_record(pretrain, v)
    stage["pretrain_records"] = write_records
    return jobs


def _experiment(command, config, extra):
    return [sys.executable, "-m", "experiments.run", command, *config["_flag"], *extra]


def _schedule(jobs, parallel, stop, logs, env, stage, stream):
    """Starts each job once it is ready, `parallel` at a time, in order; at `stop`, SIGTERM,
    then SIGKILL after `STOP_GRACE`. Every second: the records of what changed, streamed."""
    os.makedirs(logs, exist_ok=True)
    waiting, running = list(jobs), {}
    ended, last_line, begun = stage.get("ended", {}), time.time(), time.time()
    while time.time() < stop and (running or any(r is None or r() for _, _, r in waiting)):
        for job in [j for j in waiting if j[2] is None or j[2]()]:
            if len(running) >= parallel:
                break
            label, command, _ = job
            waiting.remove(job)
            log = open(os.path.join(logs, label.replace(" ", "_") + ".log"), "w")
            running[label] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                               env=env, start_new_session=True), log,
                              time.time())
        time.sleep(1)
        for label, (process, log, at) in list(running.items()):
            if process.poll() is not None:
                _ended(stage, running.pop(label), label, stop=False)
                ended[label] = True
        if "pretrain_records" in stage:
            stage["pretrain_records"]()
        stream()
        if time.time() - last_line >= 60:
            last_line = time.time()
            print(f"{last_line - begun:.0f} s: running {', '.join(running) or 'nothing'}; "
                  f"{len(waiting)} waiting", flush=True)
    for process, _, _ in running.values():
        os.killpg(process.pid, signal.SIGTERM)
    grace = time.time() + STOP_GRACE
    for label, entry in running.items():
        try:
            entry[0].wait(max(0.1, grace - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(entry[0].pid, signal.SIGKILL)
            entry[0].wait()
        _ended(stage, entry, label, stop=True)
    stage["processes"] += [{"run": label, "exit": None, "stopped": "not started"}
                           for label, _, _ in waiting]
    if "pretrain_records" in stage:  # a run killed mid-block: recorded where it stopped
        stage["pretrain_records"]()


def _ended(stage, entry, label, stop):
    process, log, at = entry
    log.close()
    if label.startswith("encoder ") and process.returncode == 0:
        with open(log.name) as f:  # its last line: name, sha256, bytes
            written = json.loads(f.read().strip().splitlines()[-1])
        stage["encoders"][written.pop("encoder")] = written
    stage["processes"].append({"run": label, "exit": process.returncode, "stopped": stop,
                               "seconds": round(time.time() - at, 1)})
    print(f"{label}: exit {process.returncode}{' (stopped at the deadline)' if stop else ''}",
          flush=True)


class Stream:
    """Packs the record folders, the logs and the stage record into `out/records.tar.gz`
    whenever a file in them changed: written aside, then renamed, so a kill at any moment
    leaves the last whole pack; encoders are written into `out/encoders/` by their jobs."""

    def __init__(self, out, folders, stage, logs):
        self.out, self.folders, self.stage, self.logs = out, folders, stage, logs
        self.signature = self.text = None

    def __call__(self, force=False):
        text = json.dumps({k: v for k, v in self.stage.items()
                           if not callable(v) and k != "ended"}, indent=2) + "\n"
        if text != self.text:
            self.text = records.write_text(os.path.join(self.logs, "stage.json"), text) and text
        files = sorted(os.path.join(root, name) for _, folder in self.folders
                       for root, _, names in os.walk(folder) for name in names)
        signature = [(path, os.stat(path).st_mtime_ns, os.stat(path).st_size)
                     for path in files if os.path.exists(path)]
        if signature == self.signature and not force:
            return
        self.signature = signature
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            for arcname, folder in self.folders:
                if os.path.isdir(folder):
                    archive.add(folder, arcname=arcname)
        if len(buffer.getvalue()) > load_stages()["machine"]["back_file_bytes"]:
            raise StudyError(f"The records pack to {len(buffer.getvalue()) / 2**20:.1f} MiB, "
                             "more than one file that comes back.")
        with open(os.path.join(self.out, PACK + ".partial"), "wb") as f:
            f.write(buffer.getvalue())
        os.replace(os.path.join(self.out, PACK + ".partial"), os.path.join(self.out, PACK))


def write_encoder(init, path):
    """A pre-trained masked LM (a run's final preset or checkpoint) in bfloat16: its preset
    folder (config, tokenizer, weights) as one tar, written aside then renamed. Prints its
    name, sha256 and size; refuses (nothing left) one that would pass the limits
    of what comes back (`path`: `--out`/encoders/<study>/<name>.tar)."""
    import tempfile

    import keras_hub

    import keras_tupe.models  # noqa: F401  (registers the classes for loading)

    with tempfile.TemporaryDirectory() as folder:
        keras_hub.models.MaskedLM.from_preset(init, dtype="bfloat16").save_to_preset(folder)
        with tarfile.open(path + ".partial", "w") as archive:
            archive.add(folder, arcname="preset")
    machine, out = load_stages()["machine"], os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(path))))
    files = [os.path.join(root, n) for root, _, names in os.walk(out) for n in names]
    if len(files) > machine["back_files"] or sum(map(os.path.getsize, files)) > (
            machine["back_bytes"] - 2**20 * 2) or os.path.getsize(path + ".partial") > (
            machine["back_file_bytes"]):
        os.remove(path + ".partial")
        raise StudyError(f"{os.path.basename(path)} would pass the limits of what comes back "
                         f"({machine['back_files']} files, {machine['back_bytes']} bytes): "
                         "not kept")
    os.replace(path + ".partial", path)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    print(json.dumps({"encoder": os.path.relpath(path, out), "sha256": digest,
                      "bytes": os.path.getsize(path)}), flush=True)


def read_encoder(path, init, vocab=None):
    """The masked LM that `write_encoder` brought home (its `.tar`, or the `.tar.xz`
    `prepare` carries), as a float32 preset folder at `init` (where its run kept it), and
    its vocabulary at `vocab` (where fine-tuning reads it), so that a later stage
    fine-tunes it without pre-training again."""
    import tempfile

    import keras_hub

    import keras_tupe.models  # noqa: F401  (registers the classes for loading)
    from keras_tupe.models.preset_folders import write_preset_folder

    with tempfile.TemporaryDirectory() as folder:
        with (lzma.open if path.endswith(".xz") else open)(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()  # the .tar's, as recorded
        with tarfile.open(path) as archive:
            archive.extractall(folder, filter="data")
        preset = os.path.join(folder, "preset")
        model = keras_hub.models.MaskedLM.from_preset(preset, dtype="float32")
        write_preset_folder(model, init, "keras_tupe_encoder", {
            "from": os.path.basename(path), "sha256": digest, "dtype": "bfloat16, cast back"})
        if vocab and not os.path.exists(vocab):
            shutil.copy(os.path.join(preset, "assets", "tokenizer", "vocabulary.txt"), vocab)


def _chosen(spec, pretrain):
    """The stage's pre-training variants: its `variants`, else every one of the study."""
    from experiments.config import variants

    return [v for v in variants(pretrain) if v.name in (spec.get("variants") or [
        v.name for v in variants(pretrain)])]


def _recorded_elsewhere(pretrain, then, variants, carried):
    """Refuses a stage that would wait for what cannot come: a run whose record is
    committed but whose run folder is not here is skipped (its record is its result), so
    its checkpoints, which the fine-tuning or length study needs, exist only as the
    encoders a window brought home."""
    if not then:
        return
    names = [v.name for v in variants if not os.path.isdir(v.run_dir) and os.path.exists(
        records.record_dir(pretrain, v.name, "run_config.json")) and not _carried(
        carried, os.path.join(pretrain["study"],
                              f"{v.name}__step{pretrain['settings']['steps']:07d}.tar"))]
    if names:
        raise StudyError(
            f"{pretrain['study']}: {', '.join(names)} pre-trained in an earlier window (their "
            f"records are in {records.record_dir(pretrain)}), and neither their run folders "
            "nor their encoders are here, so their fine-tuning could never start. Give "
            "--encoders FOLDER (what that window brought home), or run the next stage.")


def _carried(folder, name):
    """The path of encoder `name` in `folder` (carried `.tar` or `.tar.xz`), or None."""
    for path in (os.path.join(folder, name), os.path.join(folder, name + ".xz")) if folder else ():
        if os.path.exists(path):
            return path
    return None


def _encoder_name(job):
    return os.path.join(job["pretrain_study"], f"{job['variant']}__step{job['step']:07d}.tar")


def _check_packages(folder):
    """Names each module the run path needs that this machine lacks, with the real error."""
    missing = []
    for module, wheel in (("keras", "keras"), ("keras_hub", "keras-hub"), ("jax", "jax"),
                          ("grain", "grain"), ("subword_nmt", "subword-nmt")):
        try:
            __import__(module)
        except ImportError as error:
            missing.append(f"{wheel} ({type(error).__name__}: {error})")
    if missing:
        raise StudyError(f"This machine cannot import: {'; '.join(missing)}. Carry the "
                         f"wheels ({folder}/wheels/, made by `prepare`) and install them "
                         "first: run the command prepare printed, as it is.")


def _card():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30).stdout.strip() or "no GPU"
    except (OSError, subprocess.SubprocessError):
        return f"no GPU ({os.cpu_count()} cores)"


def _pip_list():
    """The machine's packages and versions, so that gpu_image.txt can be checked."""
    from importlib.metadata import distributions

    return sorted(f"{d.metadata['Name']}=={d.version}" for d in distributions())


def _lay_out(pretrain, then, folder):
    """Puts the carried shards, vocabulary, GLUE files and length batches where the configs
    name them."""
    from experiments.config import vocabulary_record_path

    settings, vocab = pretrain["settings"], pretrain["vocabulary"]
    for key, part in (("shards", "train"), ("valid_shards", "valid")):
        _link(os.path.join(folder, "shards", part), settings[key])
    if not os.path.exists(vocab["file"]):
        os.makedirs(os.path.dirname(vocab["file"]), exist_ok=True)
        shutil.copy(os.path.join(folder, "vocab.json"), vocabulary_record_path(vocab))
        shutil.copy(os.path.join(folder, "vocab.txt"), vocab["file"])
    if then and then["kind"] == "length":
        from experiments.length_study import prepared_dir

        _link(os.path.join(folder, "length"), prepared_dir(then))
    elif then and then.get("squad_file"):
        _link(os.path.join(folder, "squad", "squad.json"), then["squad_file"])
    elif then:
        _link(os.path.join(folder, "glue"), then["data_dir"])


def _link(source, target):
    if os.path.exists(target):
        return  # here already (a rehearsal on a machine that has the data)
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    os.symlink(os.path.abspath(source), target)


# === collect (here) ===

def collect(name, folder, results_dir="docs/results"):
    """Unpacks what came back into `results_dir/records/` (the logs under `stages/NAME/`);
    refuses to replace a record that differs (nothing committed is overwritten silently),
    but takes a `.jsonl` record that grew. Returns the files written."""
    path = os.path.join(folder, PACK)
    if not os.path.exists(path):
        raise StudyError(f"{folder} holds no {PACK}: nothing came back from stage {name}.")
    target, written = os.path.join(results_dir, "records"), []
    with tarfile.open(path, mode="r:gz") as archive:
        for member in (m for m in archive.getmembers() if m.isfile()):
            where = os.path.join(target, *(("stages", name) if member.name.startswith(
                "logs/") else ()), member.name)
            content = archive.extractfile(member).read()
            here = open(where, "rb").read() if os.path.exists(where) else None
            if here not in (None, content) and not (
                    where.endswith(".jsonl") and content.startswith(here)):
                raise StudyError(f"{where} exists with other content: move it away first "
                                 f"(stage {name} brought another version back).")
            written.append((where, content))
    for where, content in written:
        os.makedirs(os.path.dirname(where), exist_ok=True)
        with open(where, "wb") as f:
            f.write(content)
    return [where for where, _ in written]


def main(argv=None):
    from keras_tupe_cli.common import one_line_errors, run as run_cli

    def _main(argv):
        parser = argparse.ArgumentParser(prog="python -m experiments.stage", description=__doc__,
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
        one_line_errors(parser)
        commands = parser.add_subparsers(dest="command", required=True)
        for command in ("prepare", "run", "collect"):
            commands.add_parser(command).add_argument("stage")
        for command in ("prepare", "run"):
            commands.choices[command].add_argument("--tiny", action="store_true",
                                                   help="the tiny rehearsal")
            commands.choices[command].add_argument(
                "--encoders", help="the encoders folder an earlier call brought home")
        sub = commands.choices["run"]
        sub.add_argument("--out", default=os.environ.get("OUT", "stage_out"))
        sub.add_argument("--started", type=float, help="when the command started (epoch s)")
        sub.add_argument("--deadline", type=float, help="seconds after --started")
        sub.add_argument("--parallel", type=int, help="processes at once (default: cores / 2)")
        sub.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
        commands.choices["collect"].add_argument("folder", help="what came back")
        sub = commands.add_parser("encoder")  # run's own: one encoder in bfloat16
        sub.add_argument("init", help="a run's final preset or checkpoint")
        sub.add_argument("path")
        args = parser.parse_args(argv)
        if args.command == "prepare":
            print("\n".join(prepare(args.stage, args.tiny, encoders=args.encoders)))
        elif args.command == "run":
            run(args.stage, args.out, args.tiny, args.deadline, args.started,
                phases=tuple(args.phases), parallel=args.parallel, encoders=args.encoders)
        elif args.command == "encoder":
            write_encoder(args.init, args.path)
        else:
            for path in collect(args.stage, args.folder):
                print(f"wrote {path}")
            print("next: python -m experiments.run report")
        return 0
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())

"""GPU stages: prepared here, run whole in one lent GPU window, their records brought back.

    python -m experiments.stage prepare S1 [--tiny]    # here, with TensorFlow: .stage/S1/
    python -m experiments.stage run S1 [--tiny] [--deadline S] [--out DIR]    # there
    python -m experiments.stage collect S1 DIR         # here: the records that came back

A stage (`experiments/stages.json`) is a pre-training study whose variants train at once,
then the fine-tuning or length study of what they trained; or one benchmark command.
`prepare` writes into `.stage/NAME/` what the lent machine lacks (token-id shards, the
vocabulary, the GLUE files, the length study's masked batches, wheels), prints what travels
against the limit and refuses a stage that would not fit. `run` stops every run before its
deadline (a stopped pre-training run is recorded as such, a fine-tuning or length study
keeps each finished run), prints where each run is every minute, and packs the records,
logs and `stage.json` (command, card, times, what each process did) into `--out` within the
limits of what comes back. `--tiny` runs the same stage at the tiny size with a few steps:
the rehearsal `make test-jax` runs.
"""

import argparse
import glob
import io
import json
import os
import platform
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
STAGE_DIR = ".stage"
PACK = "records.tar.xz"
# What a stopped process needs to write its record, and the packing after it.
STOP_GRACE_SECONDS = 20
PACK_RESERVE_SECONDS = 25
# The tiny rehearsal: every setting that makes a run long, shrunk.
TINY_PRETRAIN = {"steps": 10, "eval_every": 5, "valid_batches": 1, "save_steps": [0, 3],
                 "batch_size": 4, "seq_len": 32}
TINY_FINETUNE = {"epochs": 1, "batch_size": 8, "seq_len": 32}
TINY_EXAMPLES = 24
# The length study at tiny size: the tiny presets' 128 absolute positions are outgrown at 256.
TINY_LENGTH = {"lengths": [32, 128, 256], "tokens_per_batch": 256, "batches": 2,
               "max_lines": 300}
TINY_VOCABULARY = {"vocabulary_size": 300, "lines": 300}
TINY_TASKS = 2  # the first two of the stage's tasks
# SQuAD at the tiny length: windows of 32 tokens need a short query and stride; a file of
# the first articles (each its first paragraph and questions; one article is held out) and
# a few training questions (each about ten windows) keep it short.
TINY_SQUAD = {"doc_stride": 16, "max_query_length": 12, "max_train_examples": 8}
TINY_SQUAD_ARTICLES, TINY_SQUAD_QUESTIONS = 5, 6
# A benchmark stage at tiny size: appended to its command, so these win (argparse keeps the
# last); one length, one timed step, three models, one process per mode (--interleave).
TINY_BENCHMARK = ["--size", "tiny", "--seq-lens", "32", "--repeats", "1", "--warmup", "0",
                  "--interleave", "--variants", "bert_a", "tupe_r", "keras_hub_bert"]
# Processes at once: every run of a phase on a lent GPU machine (16 cores), fewer here.
PARALLEL = max(1, (os.cpu_count() or 2) // 2)


def load_stages():
    with open(STAGES_FILE) as f:
        return json.load(f)


def stage_spec(name):
    stages = load_stages()["stages"]
    if name not in stages:
        raise StudyError(f"Unknown stage {name!r}. Valid: {', '.join(stages)}.")
    return stages[name]


def stage_configs(spec, tiny=False, work=None):
    """The stage's `(pretrain, then)` configs (either may be None; `then`: its fine-tuning
    or length study); with `tiny`, copies at the tiny size written into `work`, whose runs
    and records stay there."""
    configs = [spec.get(key) and load_config(spec[key]) for key in ("pretrain", _then(spec))]
    if not tiny:
        return configs
    return _tiny_configs(*configs, work=work)


def _then(spec):
    return "length" if "length" in spec else "finetune"


def _tiny_configs(pretrain, then, work):
    os.makedirs(work, exist_ok=True)
    written = {}
    if pretrain:
        raw = {k: v for k, v in pretrain.items() if not k.startswith("_") and k != "base"}
        raw.update(size="tiny", runs_dir=os.path.join(work, "runs"),
                   results_dir=os.path.join(work, "results"),
                   vocabulary={**raw["vocabulary"], **TINY_VOCABULARY,
                               "file": os.path.join(work, "vocab.txt")})
        raw["settings"] = {**raw["settings"], **TINY_PRETRAIN,
                           "shards": os.path.join(work, "shards", "train"),
                           "valid_shards": os.path.join(work, "shards", "valid")}
        raw.pop("references", None)
        raw.pop("seed", None)
        raw.pop("overrides", None)
        raw["kind"] = "pretrain"
        written["pretrain"] = _write_json(os.path.join(work, "pretrain.json"), raw)
    if then:
        raw = {k: v for k, v in then.items() if not k.startswith("_")}
        raw.update(pretrain_configs=["pretrain.json"], runs_dir=os.path.join(work, "runs"),
                   results_dir=os.path.join(work, "results"))
    if then and then["kind"] == "length":
        raw.update(TINY_LENGTH)
        written["then"] = _write_json(os.path.join(work, "length.json"), raw)
    elif then:
        raw.update(tasks=raw["tasks"][:TINY_TASKS], data_dir=os.path.join(work, "glue"),
                   learning_rates=raw["learning_rates"][:1], seeds=raw["seeds"][:1],
                   edge_learning_rates=[], selection_seed=raw["seeds"][0],
                   settings={**raw["settings"], **TINY_FINETUNE},
                   task_settings={task: {"max_train_examples": TINY_EXAMPLES}
                                  for task in raw["tasks"][:TINY_TASKS] if task != "squad"})
        if raw.get("squad_file"):
            raw["squad_file"] = os.path.join(work, "squad.json")
            raw["settings"].update(TINY_SQUAD)
        raw["checkpoint_variants"] = {
            key: [name.rpartition("/")[2] for name in names]
            for key, names in raw.get("checkpoint_variants", {}).items()}
        raw.pop("ceiling", None)
        written["then"] = _write_json(os.path.join(work, "finetune.json"), raw)
    return [written.get(key) and load_config(written[key]) for key in ("pretrain", "then")]


def _write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=2)
    return path


# === prepare (here) ===

def prepare(name, tiny=False, dest=STAGE_DIR):
    """Writes `dest/NAME/` and returns the lines that say what travels; refuses a stage
    that would not fit."""
    spec, limits = stage_spec(name), load_stages()["limits"]
    if "pretrain" in spec and not tiny:
        _check_time(name, spec, stage_configs(spec)[0])
    if "command" in spec and not tiny:
        _check_benchmark_time(name, spec)
    folder = os.path.join(dest, name + ("_tiny" if tiny else ""))
    staging = folder + ".partial"
    shutil.rmtree(staging, ignore_errors=True)  # only ever this command's own leftover
    os.makedirs(staging)
    pretrain, then = stage_configs(spec, tiny, os.path.join(staging, "work"))
    if pretrain:
        _prepare_pretraining(pretrain, spec, staging, tiny)
    if then and then["kind"] == "length":
        from experiments.length_study import write_prepared

        write_prepared(then, os.path.join(staging, "length"))
    elif then:
        _prepare_finetune_data(stage_configs(spec)[1], staging, tiny)
    _compress_data(staging)
    if not tiny:
        _download_wheels(load_stages()["wheels"], os.path.join(staging, "wheels"))
    if os.path.exists(folder):
        shutil.rmtree(folder)  # the previous preparation of this stage: made again whole
    os.rename(staging, folder)
    carried, tree = _size(folder), _tree_size()
    lines = [f"{folder}: {carried / 2**20:.1f} MiB", f"working tree: {tree / 2**20:.1f} MiB",
             f"travels: {(carried + tree) / 2**20:.1f} MiB of {limits['carry_bytes'] / 2**20:.0f}"]
    if carried + tree > limits["carry_bytes"]:
        raise StudyError(f"Stage {name} does not fit: {(carried + tree) / 2**20:.1f} MiB would "
                         f"travel, the limit is {limits['carry_bytes'] / 2**20:.0f} MiB "
                         f"({folder}: {carried / 2**20:.1f} MiB).")
    lines.append(f"run there (carry {folder}): {device_command(name, folder, tiny)}")
    if "pretrain" in spec and then and not tiny:
        lines.append("or in two calls on the same warm machine: the same with `--phases "
                     f"pretrain --deadline 560`, then `--phases {_then(spec)} --deadline S` "
                     "(S: the device time left, less two minutes)")
    return lines


def device_command(name, folder, tiny=False):
    install = (f"python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "
               f"{folder}/wheels/*.whl && export PYTHONPATH=/tmp/site; ")
    return ("" if tiny else install) + (
        f"python3 -m experiments.stage run {name}{' --tiny' if tiny else ''} --out $OUT")


def _prepare_pretraining(config, spec, staging, tiny):
    """The vocabulary and the token-id shards the study names, made here (TensorFlow)."""
    from experiments.config import ensure_vocabulary, vocabulary_record_path
    from keras_tupe.data.sharding import shard_corpus

    vocab = config["vocabulary"]
    ensure_vocabulary(config)
    lines = {"train": TINY_EXAMPLES * 20, "valid": TINY_EXAMPLES * 4} if tiny else {}
    sources = spec.get("shards") or {}
    settings = config["settings"]
    for key, part in (("shards", "train"), ("valid_shards", "valid")):
        corpus = sources.get(part)  # the same text at --tiny, fewer lines of it
        if corpus is None:
            raise StudyError(f"stages.json: the stage names no corpus for {settings[key]}.")
        out = os.path.join(staging, "shards", part)
        shard_corpus([corpus], vocab["file"], out, settings["seq_len"],
                     lowercase=vocab["lowercase"], max_lines=lines.get(part))
    shutil.copy(vocab["file"], os.path.join(staging, "vocab.txt"))
    shutil.copy(vocabulary_record_path(vocab), os.path.join(staging, "vocab.json"))


def _check_time(name, spec, pretrain):
    """Refuses a stage whose pre-training cannot end by its `pretrain_seconds`, at the
    recorded GPU pace (runs of the same size and steps trained `GPU_AT_ONCE` at a time)."""
    seconds = gpu_pretrain_seconds(pretrain["results_dir"], pretrain["size"],
                                   pretrain["settings"]["steps"])
    runs = len(spec.get("variants") or pretrain["variants"])
    needed = -(-runs // GPU_AT_ONCE) * seconds
    if needed > spec["pretrain_seconds"]:
        raise StudyError(
            f"Stage {name} does not fit: {runs} pre-training runs need about {needed:.0f} s "
            f"({GPU_AT_ONCE} at once, {seconds:.0f} s each on the recorded GPU runs), more "
            f"than its pretrain_seconds {spec['pretrain_seconds']}; split it.")


def _check_benchmark_time(name, spec):
    """Refuses a benchmark stage whose rows, a fresh process each at the seconds of
    `benchmark_seconds` (stages.json: an estimate and its basis), would not end in time."""
    from benchmarks.encoders.cli import (DEFAULT_REPEATS, DEFAULT_SEQ_LENS, FLASH, QUICK,
                                         parse_args)

    args, seconds = parse_args(spec["command"][1:]), load_stages()["benchmark_seconds"]
    if not (args.variants and args.precisions):
        raise StudyError(f"Stage {name}: a benchmark stage names its --variants and "
                         "--precisions, so that its length is known here.")
    quick = QUICK if args.quick else {}
    # The benchmark's own defaults and de-duplication; each round runs every row again in
    # a fresh process, and rounds are capped at the repeats.
    rounds = min(args.rounds, args.repeats or quick.get("repeats", DEFAULT_REPEATS))
    rows = (len(set(args.variants)) * len(set(args.precisions)) * rounds
            * len(set(args.seq_lens or quick.get("seq_lens", DEFAULT_SEQ_LENS)))
            * len(FLASH[args.flash]) * (2 if args.xla == "both" else 1))
    modes = set(args.modes)
    needed = seconds["start"] + sum(rows * seconds[mode] for mode in modes)
    if needed > spec["deadline_seconds"] - PACK_RESERVE_SECONDS:
        raise StudyError(f"Stage {name} does not fit: its {rows * len(modes)} rows need "
                         f"about {needed} s (benchmark_seconds), more than its "
                         f"deadline_seconds {spec['deadline_seconds']} less "
                         f"{PACK_RESERVE_SECONDS} s to pack; split it.")


# The recorded GPU runs (long_v2_jax*) trained four at a time on one card.
GPU_AT_ONCE = 4


def gpu_pretrain_seconds(results_dir, size, steps):
    """The longest wall time of the recorded GPU pre-training runs of `size`, scaled to
    `steps` (records whose machine is a GPU machine)."""
    times = []
    for path in glob.glob(os.path.join(results_dir, "records", "*", "*", "run_config.json")):
        run = records.read_json(path)
        if "gpu" in run.get("versions", {}).get("machine", "") and run.get("last_step") and (
                run["config"]["preset"].endswith(f"_{size}")):
            times.append(run["wall_seconds"] / run["last_step"] * steps)
    if not times:
        raise StudyError(f"No recorded GPU run of size {size!r} to time a stage by.")
    return max(times)


def _prepare_finetune_data(config, staging, tiny):
    """Each GLUE task's train and dev files (the first `TINY_EXAMPLES` lines at `--tiny`),
    or the SQuAD file (at `--tiny`, the first paragraph of its first articles)."""
    from keras_tupe.data.glue import get_task

    if config.get("squad_file"):
        os.makedirs(os.path.join(staging, "squad"))
        target = os.path.join(staging, "squad", "squad.json")
        if not tiny:
            shutil.copy(config["squad_file"], target)
            return
        squad = records.read_json(config["squad_file"])
        squad["data"] = [{**article, "paragraphs": [{
            **article["paragraphs"][0],
            "qas": article["paragraphs"][0]["qas"][:TINY_SQUAD_QUESTIONS]}]}
            for article in squad["data"][:TINY_SQUAD_ARTICLES]]
        records.write_json(target, squad)
        return
    for name in config["tasks"]:
        task = get_task(name)
        os.makedirs(os.path.join(staging, "glue", task.directory), exist_ok=True)
        cap = (config.get("task_settings") or {}).get(name, {}).get("max_train_examples")
        for split in ("train", *task.eval_splits):
            lines = TINY_EXAMPLES if tiny else (cap if split == "train" else None)
            file = task.split_files[split]
            with open(os.path.join(config["data_dir"], task.directory, file),
                      encoding="utf-8") as source, open(
                    os.path.join(staging, "glue", task.directory, file), "w",
                    encoding="utf-8") as f:
                for index, line in enumerate(source):  # the header, then the examples
                    if lines is not None and index > lines:
                        break
                    f.write(line)


DATA_PACK = "data.tar.xz"
DATA_PARTS = ("shards", "glue", "squad", "length", "vocab.txt", "vocab.json")


def _compress_data(staging):
    """The data as one xz tar (token ids compress to about half); `run` unpacks it."""
    with tarfile.open(os.path.join(staging, DATA_PACK), "w:xz") as archive:
        for name in DATA_PARTS:
            path = os.path.join(staging, name)
            if os.path.exists(path):
                archive.add(path, arcname=name)
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)


def _unpack_data(folder):
    if os.path.exists(os.path.join(folder, DATA_PACK)) and not os.path.exists(
            os.path.join(folder, "vocab.txt")):
        with tarfile.open(os.path.join(folder, DATA_PACK)) as archive:
            archive.extractall(folder, filter="data")


def _download_wheels(names, folder):
    """Wheels for the lent machine's Python 3.12 of the versions installed here."""
    from importlib.metadata import version

    platforms = [f"--platform=manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28)]
    pins = [f"{name}=={version(name)}" for name in names]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--only-binary=:all:", "--python-version=3.12", "--implementation=cp",
                    *platforms, "--platform=manylinux2014_x86_64", "-d", folder, *pins],
                   check=True)


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


def run(name, out, tiny=False, deadline=None, folder=None, phases=PHASES):
    """Runs the stage's `phases` before `deadline` seconds from now; packs its records into
    `out`. Returns the stage record.

    One call runs every phase. Where one call's limit is too short, two calls on the same
    warm machine run `pretrain`, then `finetune` or `length` (the run folders stay between
    them)."""
    start = time.time()
    spec = stage_spec(name)
    deadline = start + (deadline or spec["deadline_seconds"])
    folder = folder or os.path.join(STAGE_DIR, name + ("_tiny" if tiny else ""))
    _check_packages(folder)
    _unpack_data(folder)
    work = os.path.join(folder, "work")
    if tiny and "pretrain" in phases:  # a rehearsal starts from nothing, as the lent machine
        for made in ("runs", "results", "logs"):
            shutil.rmtree(os.path.join(work, made), ignore_errors=True)
    pretrain, then = stage_configs(spec, tiny, work)
    phases = [p for p in phases if p in spec] or ["command"]
    finetune = then if "finetune" in phases else None
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    stage = {"stage": name, "tiny": tiny, "phases": phases,
             "command": records.command_line(sys.argv[1:]),
             "card": _card(), "versions": records.machine(), "started": records.now(),
             "processes": []}
    if "command" in spec:  # its report (and, if stopped, its rows so far) packed as logs
        command = [sys.executable, "-m", *spec["command"], "--out",
                   os.path.join(work, "logs", "benchmark"), "--overwrite",
                   *(TINY_BENCHMARK if tiny else [])]
        stage["processes"] += _run_all([command], ["benchmark"],
                                       deadline - PACK_RESERVE_SECONDS, work)
    if pretrain:
        _lay_out(pretrain, then, folder, tiny)
        names = spec.get("variants") or list(pretrain["variants"])
    if pretrain and "pretrain" in phases:
        stop = deadline - PACK_RESERVE_SECONDS  # a rehearsal's pace is the CPU's
        if not tiny and len(phases) > 1:
            stop = min(start + spec["pretrain_seconds"], stop)
        stage["processes"] += _run_all(
            [_experiment("pretrain", pretrain, ["--variants", v]) for v in names],
            [f"pretrain {v}" for v in names], stop, work, progress=_pretrain_progress(pretrain))
    if "length" in phases:  # one process: one unigram reference, one report
        from experiments.config import variants

        done = [v.name for v in variants(pretrain) if v.name in names and v.is_finished]
        stage["processes"] += _run_all(
            [_experiment("length", then, ["--variants", *done])] if done else [], ["length"],
            deadline - PACK_RESERVE_SECONDS, work)
    if finetune:
        from experiments.finetune_study import plan

        jobs = [job for job in plan(finetune) if job["variant"] in names]
        steps = pretrain["settings"]["steps"]
        fraction = {round(f * steps): f for f in finetune["checkpoints"]}
        commands = [_experiment("finetune", finetune, [
            "--variants", job["variant"], "--checkpoints", repr(fraction[job["step"]])])
            for job in jobs]
        labels = [f"finetune {job['variant']} step {job['step']}" for job in jobs]
        stage["processes"] += _run_all(commands, labels, deadline - PACK_RESERVE_SECONDS, work)
    stage["seconds"] = round(time.time() - start, 1)
    records.write_json(os.path.join(work, "logs", f"stage_{'_'.join(phases)}.json"), stage)
    stage["packed"] = pack([c for c in (pretrain, then) if c], work, out)
    print(f"stage {name}: {stage['seconds']:.0f} s, packed {stage['packed']}", flush=True)
    return stage


def _experiment(command, config, extra):
    return [sys.executable, "-m", "experiments.run", command, *config["_flag"], *extra]


def _check_packages(folder):
    missing = []
    for module, wheel in (("keras", "keras"), ("keras_hub", "keras-hub"), ("jax", "jax")):
        try:
            __import__(module)
        except ImportError:
            missing.append(wheel)
    try:
        import tensorflow  # noqa: F401  (tf.data feeds fine-tuning where it is)
    except ImportError:
        try:
            import grain  # noqa: F401  (keras-hub's loader without TensorFlow)
        except ImportError:
            missing.append("grain")
    if missing:
        raise StudyError(f"This machine lacks {', '.join(missing)}: carry their wheels "
                         f"({folder}/wheels/, made by `python -m experiments.stage prepare`) "
                         "and install them first (the command prepare printed).")


def _card():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30).stdout.strip() or "no GPU"
    except (OSError, subprocess.SubprocessError):
        return f"no GPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def _lay_out(pretrain, then, folder, tiny):
    """Puts the carried shards, vocabulary, GLUE files and length batches where the configs
    name them."""
    settings = pretrain["settings"]
    for key, part in (("shards", "train"), ("valid_shards", "valid")):
        _link(os.path.join(folder, "shards", part), settings[key])
    from experiments.config import vocabulary_record_path

    vocab = pretrain["vocabulary"]
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


def _pretrain_progress(config):
    from experiments.config import variants

    def line():
        rows = []
        for variant in variants(config):
            logged, _ = records.read_metrics(variant.run_dir)
            last = logged[-1] if logged else None
            rows.append(f"{variant.name} " + (
                f"step {last['step']}, val_loss {last['val_loss']:.3f}" if last else "starting"))
        return "; ".join(rows)
    return line


def _run_all(commands, labels, stop, work, progress=None):
    """Runs `commands`, `PARALLEL` at a time, until each ends or `stop` (then SIGTERM, a
    grace, SIGKILL); prints where they are every minute. Returns what each did."""
    env = {**os.environ, "KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "jax"),
           "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "PYTHONUNBUFFERED": "1",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    started = time.time()
    waiting, procs = list(zip(commands, labels)), []
    last_print = started
    while time.time() < stop and (waiting or any(p.poll() is None for p, _, _ in procs)):
        while waiting and sum(p.poll() is None for p, _, _ in procs) < PARALLEL:
            command, label = waiting.pop(0)
            log = open(os.path.join(work, "logs", label.replace(" ", "_") + ".log"), "w")
            procs.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                           env=env), label, log))
        time.sleep(1)
        if time.time() - last_print >= 60:
            last_print = time.time()
            running = sum(p.poll() is None for p, _, _ in procs)
            print(f"{last_print - started:.0f} s: {running} running, {len(waiting)} waiting, "
                  f"{len(procs) - running} done" + (f"; {progress()}" if progress else ""),
                  flush=True)
    stopped = [p for p, _, _ in procs if p.poll() is None]
    for p in stopped:
        p.send_signal(signal.SIGTERM)
    for p in stopped:
        try:
            p.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    done = [{"run": label, "exit": None, "stopped": True, "seconds": 0}
            for _, label in waiting]
    for p, label, log in procs:
        log.close()
        done.append({"run": label, "exit": p.returncode, "stopped": p in stopped,
                     "seconds": round(time.time() - started, 1)})
        print(f"{label}: exit {p.returncode}{' (stopped at the deadline)' if p in stopped else ''}",
              flush=True)
    return done


def pack(configs, work, out):
    """The configs' record folders, the logs and the stage record as xz tar parts in `out`
    (at most `back_files` files of `back_file_bytes`). Returns the file names."""
    limits = load_stages()["limits"]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as archive:
        for config in configs:
            folder = records.record_dir(config)
            if os.path.isdir(folder):
                archive.add(folder, arcname=config["study"])
        archive.add(os.path.join(work, "logs"), arcname="logs")
    data = buffer.getvalue()
    part = limits["back_file_bytes"] - 2**20
    parts = [data[i:i + part] for i in range(0, len(data), part)] or [b""]
    if len(parts) > limits["back_files"]:
        raise StudyError(f"The records pack to {len(data) / 2**20:.1f} MiB, more than "
                         f"{limits['back_files']} files of {part / 2**20:.0f} MiB.")
    os.makedirs(out, exist_ok=True)
    names = [PACK if len(parts) == 1 else f"{PACK}.{i:02d}" for i in range(len(parts))]
    for name, chunk in zip(names, parts):
        with open(os.path.join(out, name), "wb") as f:
            f.write(chunk)
    return names


# === collect (here) ===

def collect(name, folder, results_dir="docs/results"):
    """Unpacks what `run` packed into `results_dir/records/`; refuses to replace a record
    that differs (nothing committed is overwritten silently), but takes a `.jsonl` record
    that grew (the rows here, then new ones: the three S5 stages append to one length
    record, each collected before the next runs). Returns the files written."""
    parts = sorted(glob.glob(os.path.join(folder, PACK + "*")))
    if not parts:
        raise StudyError(f"{folder} holds no {PACK}: nothing came back from stage {name}.")
    data = b"".join(open(path, "rb").read() for path in parts)
    target = os.path.join(results_dir, "records")
    written = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as archive:
        members = [m for m in archive.getmembers() if m.isfile()]
        for member in members:
            path = os.path.join(target if not member.name.startswith("logs/") else
                                os.path.join(target, "stages", name), member.name)
            content = archive.extractfile(member).read()
            here = open(path, "rb").read() if os.path.exists(path) else None
            if here not in (None, content) and not (
                    path.endswith(".jsonl") and content.startswith(here)):
                raise StudyError(f"{path} exists with other content: move it away first "
                                 f"(stage {name} brought another version back).")
            written.append((path, content))
    for path, content in written:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)
    return [path for path, _ in written]


def main(argv=None):
    from training.cli import one_line_errors, run as run_cli

    def _main(argv):
        parser = argparse.ArgumentParser(prog="python -m experiments.stage", description=__doc__,
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
        one_line_errors(parser)
        commands = parser.add_subparsers(dest="command", required=True)
        for command in ("prepare", "run"):
            sub = commands.add_parser(command)
            sub.add_argument("stage")
            sub.add_argument("--tiny", action="store_true", help="the tiny rehearsal")
        commands.choices["run"].add_argument("--out", default=os.environ.get("OUT", "stage_out"))
        commands.choices["run"].add_argument("--deadline", type=float,
                                             help="seconds from now (default: the stage's)")
        commands.choices["run"].add_argument(
            "--phases", nargs="+", choices=PHASES, default=list(PHASES),
            help="pretrain, then finetune or length in a second call on the same warm machine")
        sub = commands.add_parser("collect")
        sub.add_argument("stage")
        sub.add_argument("folder", help="where the packed records came back")
        args = parser.parse_args(argv)
        if args.command == "prepare":
            print("\n".join(prepare(args.stage, args.tiny)))
        elif args.command == "run":
            run(args.stage, args.out, args.tiny, args.deadline, phases=tuple(args.phases))
        else:
            for path in collect(args.stage, args.folder):
                print(f"wrote {path}")
            print("next: python -m experiments.run report")
        return 0
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())

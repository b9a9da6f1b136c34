"""The stage's own jobs (a process each, `python -m experiments.stage JOB`): a planned
window's grid, built and compiled beside the calibration and trained for the plan's steps; a
variant's fine-tuning programs compiled ahead, then its encoders fine-tuned as one program;
an encoder written in bfloat16 to come home, and read back as a preset folder."""

import json
import os
import shutil
import tarfile
import tempfile
import time

from experiments import records
from experiments.config import StudyError, ensure_vocabulary, load_config, require_models, variants
from experiments.plans import finetune_plan, protocol, protocol_settings
from experiments.run import SETTINGS_FILE, grid_config, run_grid
from experiments.stage import budget, specs
from keras_tupe_base.files import tree_sha256
from keras_tupe_base.settings import FinetuneConfig
from keras_tupe_base.staging import staged


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
        run_protocol(*protocol_settings(config, jobs, tasks, grid=config.get("grid") or {}),
                     task_settings=config.get("task_settings"),
                     together=[(job["init"], job["out"]) for job in jobs[1:]])


def pretrain_planned(config, group, work, command):
    """A planned window's grid of one variant (`group`: its seeds as one program), started
    beside the calibration: it loads the shards, builds the grid and compiles its program
    while the card is timed (`grid_pretrainer`, `GridPretrainer.compile`), waits for the
    plan (`WORK/logs/plan.json`), then trains that grid for the plan's steps (the prepared
    config as the calibration rewrote it: `run_grid`'s `pretrainer`), or nothing where the
    plan says so."""
    from keras_tupe.pretraining import grid_pretrainer

    started = time.time()
    seeds = [v for v in variants(config) if v.group == group]
    ensure_vocabulary(config, command=command)
    aim, dispatch = grid_config(config, seeds), config["grid"].get("steps_per_dispatch", 100)
    built = grid_pretrainer(aim, [(v.seed, aim.learning_rate) for v in seeds], dispatch)
    built.compile(dispatch)  # the program it trains
    # Its log says when the grid was ready, and when the plan came.
    print(f"{group}: built and compiled in {time.time() - started:.0f} s; waiting for the "
          "plan", flush=True)
    while (record := budget.read_plan(work)) is None:
        time.sleep(1)
    planned = record["plan"].get("run")
    print(f"{group}: the plan after {time.time() - started:.0f} s: "
          + (f"{record['plan']['steps']} steps" if planned else "nothing"), flush=True)
    if not planned:
        print(f"[{config['study']}] {group} seeds {[v.seed for v in seeds]}: not planned, "
              "nothing trained", flush=True)
        return
    config = load_config(config["_path"])  # its steps and save steps, the plan's
    run_grid(config, [v for v in variants(config) if v.group == group], command,
             pretrainer=built)


def compile_together(config, names, tasks):
    """The programs `finetune_together` will run for one variant (`names`: its seeds) on
    `tasks`, compiled beside its grid (the host is idle while the card pre-trains) into the
    shared compilation cache, which the fine-tuning then loads: each task's grid of every
    encoder's rates x seeds, as `run_protocol(together=...)` first runs it (`glue_grid`,
    its training and prediction compiled, nothing trained), built from the first of its
    encoders written (seed 0's initialization, before the grid's first step). Writes
    nothing else."""
    from keras_tupe.finetuning import glue_grid

    jobs = finetune_plan(config, names)
    start = next((job for job in jobs if os.path.isdir(job["init"])), None)
    if start is None:
        raise StudyError(f"Nothing to compile from: no encoder of {', '.join(names)} is "
                         f"written yet ({jobs[0]['init']} and {len(jobs) - 1} more).")
    chosen, settings = protocol(config), config.get("task_settings") or {}
    # Every encoder's members, each encoder as `start` (the program is the shapes').
    members = [(rate, seed) for rate in chosen.learning_rates for seed in chosen.seeds] * len(
        jobs)
    for task in tasks:
        began = time.perf_counter()
        run = FinetuneConfig(task=task, init=start["init"], vocab=start["vocab"],
                             lowercase=start["lowercase"], data_dir=config.get("data_dir"),
                             **{**config["settings"], **settings.get(task, {})})
        grid = glue_grid(run, [rate for rate, _ in members], [seed for _, seed in members],
                         **config["grid"],
                         inits=[start["init"]] * len(members) if len(jobs) > 1 else None)
        grid.trainer.compile_fit(grid.source, grid.rows, grid.weights)
        for x in grid.evaluated.values():
            grid.trainer.compile_predict(x, run.batch_size)
        print(f"[{config['study']}] {task}: {len(jobs)} encoders' grid compiled in "
              f"{time.perf_counter() - began:.1f} s", flush=True)


def write_encoder(init, path):
    """A run's masked LM (its final preset or a checkpoint) in bfloat16: one tar of its
    preset folder at `path` (`--out`/encoders/<study>/<name>.tar), written aside then
    renamed; prints its name, sha256 and size, or refuses one past what comes back."""
    import keras_hub

    import keras_tupe.models  # noqa: F401  (registers the classes for loading)

    machine, out = specs.load_stages()["machine"], os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(path))))
    with staged(path) as partial, tempfile.TemporaryDirectory() as folder:
        keras_hub.models.MaskedLM.from_preset(init, dtype="bfloat16").save_to_preset(folder)
        with tarfile.open(partial, "w") as archive:
            archive.add(folder, arcname="preset")
        files = [os.path.join(root, n) for root, _, names in os.walk(out) for n in names]
        if (len(files) > machine["back_files"] or os.path.getsize(partial) > machine[
                "back_file_bytes"] or specs.bytes_of(files) > machine["back_bytes"] - 2**21):
            # (2 MiB: the records pack)
            raise StudyError(f"{os.path.basename(path)} would pass the limits of what comes "
                             f"back ({machine['back_files']} files, {machine['back_bytes']} "
                             "bytes): not kept")
    print(json.dumps({"encoder": os.path.relpath(path, out), "sha256": specs.encoder_sha256(path),
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
            "from": os.path.basename(path), "sha256": specs.encoder_sha256(path),
            "dtype": "bfloat16, cast back"})
        if vocab and not os.path.exists(vocab):
            shutil.copy(os.path.join(preset, "assets", "tokenizer", "vocabulary.txt"), vocab)

"""The studies' runner: one command a study, one loop a kind (see experiments/README.md).

    python -m experiments.run pretrain --study pretrain [--variants A B] [--until-step N]
    python -m experiments.run pretrain --study long_v2_jax --record-only
    python -m experiments.run finetune --study finetune
    python -m experiments.run length   --study length
    python -m experiments.run report   [--study NAME]
    python -m experiments.run maps     --init runs/study/pretrain/tupe_a --out maps/tupe_a.png
    python -m experiments.run maps     --from-npz docs/results/maps/pretrain_tupe_a.npz

Every command can be stopped and started again: finished runs are skipped and an
interrupted one continues where it was. Each run writes its record under
`<results_dir>/records/<study>/` when it finishes or stops; `report` regenerates every table
and figure of `docs/results/` from those records alone.

- `pretrain`: each variant in its own resumable run folder `<runs_dir>/<study>/<variant>`
  (`keras_tupe.pretraining`), its record (`metrics.csv`, `run_config.json` with its status,
  wall time, encoder config and vocabulary record) written when it finishes or stops. A
  study with `grid` (`{"seeds": [...]}`) pre-trains each variant's seeds as one program
  (`pretrain_grid`, JAX): its runs are `<variant>_seed<s>` in `<variant>/seed_<s>`, and a
  grid stopped before its end starts anew.
- `finetune`: `keras_tupe.finetuning.run_protocol` (or the SQuAD one) on every planned
  checkpoint; the job's output folder is its record (`results.jsonl`, a run a line, so a
  stopped study continues where it was), `finetune_settings.json` pins its settings. The
  grid is not pinned: each row names its rate and seed, and the report reads the config's.
  A study with `grid` (`{"precision", "steps_per_dispatch"}`) trains each task's rates x
  seeds as one program an encoder (`run_protocol(grid=True)`).
- `length`: every planned model scored at the lengths its record (`results.jsonl`) lacks,
  on `experiments.length_study`'s fixed batches, then the unigram reference.
"""

import argparse
import dataclasses
import os
import shutil
import sys
import time

from experiments import config as study_config
from experiments import records
from experiments.config import StudyError, require_models
from experiments.plans import (finetune_plan, is_squad, length_key, length_plan, length_results,
                               protocol, protocol_settings)
from experiments.report_length import length_pages
from keras_tupe_base.command_line import add_common_flags, one_line_errors, quiet_start, run
from keras_tupe_base.files import file_sha256, tree_sha256

# Inside the functions: keras_tupe (Keras: seconds) and the siblings that import NumPy (maps,
# report, floors, report_finetuning, length_study): a usage error or a study's error comes
# first, and `experiments.stage`, which imports this module, prepares without them.


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m experiments.run", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    one_line_errors(parser)  # the parser's own errors: one line
    commands = parser.add_subparsers(dest="command", required=True)

    def with_config(name, help_text, required=True):
        sub = commands.add_parser(name, help=help_text)
        where = sub.add_mutually_exclusive_group(required=required)
        where.add_argument("--config", help="a JSON file holding one study")
        where.add_argument("--study", help="a study of experiments/studies.json, by name")
        if required:
            sub.add_argument("--variants", nargs="+", help="only these variants (default: all)")
        return add_common_flags(sub)

    sub = with_config("pretrain", "pre-train every variant of a study (resumable)")
    sub.add_argument("--verbose", type=int, default=2, choices=(0, 1, 2),
                     help="Keras progress output (2: one line per block of eval_every steps)")
    sub.add_argument("--until-step", type=int,
                     help="stop each run after this step (a multiple of eval_every), "
                          "recorded and resumable: e.g. 1000 for the 50%% checkpoint that "
                          "finetune_intermediate reads")
    sub.add_argument("--record-only", action="store_true",
                     help="train nothing: write the records of the runs in the run folders, "
                          "e.g. runs trained on another machine")
    speed = ("steps one call of the compiled train function runs (Keras fit's "
             "steps_per_execution): a speed setting, the same numbers (default 1)")
    sub.add_argument("--steps-per-execution", type=int, default=1, help=speed)
    sub = with_config("finetune", "the reduced GLUE protocol on the pre-trained checkpoints")
    sub.add_argument("--steps-per-execution", type=int, default=1, help=speed)
    sub.add_argument("--checkpoints", nargs="+", type=float,
                     help="only these fractions of the budget (default: the config's)")
    with_config("length", "masked-LM loss at longer sequences (Huang Table 4)")
    with_config("report", "every table and figure from the committed records (no training); "
                "with --study or --config, that study's and the seed and comparison pages "
                "it is part of", required=False)
    sub = commands.add_parser("maps", help="per-head positional maps of one encoder")
    source = sub.add_mutually_exclusive_group(required=True)
    source.add_argument("--init",
                        help="a pre-training run directory or a preset folder")
    source.add_argument("--from-npz", metavar="NPZ",
                        help="draw again from the arrays an earlier maps run saved (its .npz "
                             "and .json), without the model: e.g. after a plotting change")
    sub.add_argument("--out", help="PNG file to write (required with --init; default with "
                                   "--from-npz: the .npz's name as .png)")
    sub.add_argument("--length", type=int, default=64, help="positions drawn (default 64)")
    add_common_flags(sub)
    return parser.parse_args(argv)


def main(argv=None):
    """`keras_tupe_base.command_line.run`: a study's, a flag's or a path's error is one line,
    exit 2; TensorFlow, wherever it is imported, starts quietly."""
    quiet_start()
    return run(_main, argv)


def _main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    command = records.command_line(argv)
    start = time.perf_counter()
    if args.command == "maps":
        from experiments.maps import draw_maps, redraw_maps

        if args.from_npz:
            paths = redraw_maps(args.from_npz, args.out)
        elif not args.out:
            raise study_config.StudyError("maps --init needs --out (the PNG file to write).")
        else:
            paths = draw_maps(args.init, args.out, length=args.length, command=command)
    elif args.command == "report":
        from experiments.report import report

        paths = report(args.config or args.study)
    else:
        paths = _run_study(args, study_config.load_config(args.config or args.study,
                                                          kind=args.command), command)
    for path in (paths or {}).values():
        print(f"wrote {path}")
    print(f"done in {records.format_seconds(time.perf_counter() - start)}: {command}")
    return 0


def _run_study(args, config, command):
    from experiments.report import report_command

    if config.get("frozen"):  # its run would write its pages again
        raise StudyError(f"{config['_path']}: its pages are frozen as committed: "
                         f"{config['frozen']}")
    if config["kind"] == "pretrain":
        run_pretrain(config, command, only=args.variants, verbose=args.verbose,
                     until_step=args.until_step, record_only=args.record_only,
                     steps_per_execution=args.steps_per_execution)
        print(f"next: {report_command(config)}")
        return None
    if config["kind"] == "finetune":
        return run_finetune(config, command, report_command(config),
                            only_variants=args.variants, only_checkpoints=args.checkpoints,
                            steps_per_execution=args.steps_per_execution)
    return run_length(config, command, report_command(config), only_variants=args.variants)


# === Pre-training: each variant trained identically, each run recorded ===

def run_pretrain(config, command, only=None, verbose=2, until_step=None, record_only=False,
                 steps_per_execution=1):
    """Trains (or resumes, or skips) every selected variant, writing each one's record;
    with `record_only`, writes the records of the run folders there are and trains nothing.
    `steps_per_execution` is a speed setting (`PretrainConfig`'s), not one of the study's."""
    import keras

    from keras_tupe.pretraining import pretrain

    every = study_config.variants(config)
    names = {v.name for v in every} | {v.group for v in every}
    unknown = sorted(set(only or ()) - names)
    if unknown:
        raise study_config.StudyError(f"{config['_path']} has no variant(s) {unknown}. "
                                      f"Variants: {sorted(names)}")
    selected = [v for v in every if not only or {v.name, v.group} & set(only)]
    study_config.ensure_vocabulary(config, command=command)
    if "grid" in config:
        if until_step or steps_per_execution != 1:
            raise study_config.StudyError(
                f"{config['_path']} pre-trains each variant's seeds as one program (`grid`), "
                "which runs its whole budget and dispatches `grid.steps_per_dispatch` steps at "
                "once: --until-step and --steps-per-execution do not apply.")
        for group in dict.fromkeys(v.group for v in selected):
            run_grid(config, [v for v in every if v.group == group], command, record_only)
        return
    for variant in selected:
        prefix = f"[{config['study']}] {variant.name}"
        record = os.path.join(records.record_dir(config, variant.name), records.RUN_RECORD)
        if record_only:
            written = write_record(config, variant)
            print(f"{prefix}: " + (f"{written['status']}, recorded" if written
                                   else "no run folder"), flush=True)
            continue
        if os.path.exists(record) and not os.path.exists(variant.run_dir):
            print(f"{prefix}: recorded in {record}, its run folder is not here: skipped "
                  "(delete the record's folder to train it again)", flush=True)
            continue
        try:
            if variant.is_finished:
                print(f"{prefix}: finished, skipped ({variant.run_dir})", flush=True)
            else:
                print(f"{prefix}: pre-training {variant.preset} -> {variant.run_dir}",
                      flush=True)
                keras.backend.clear_session()
                pretrain(dataclasses.replace(
                    study_config.pretrain_config(config, variant, verbose=verbose),
                    steps_per_execution=steps_per_execution), until_step=until_step)
        finally:  # also when stopped: the record is always there to commit
            written = write_record(config, variant)
            if written:
                print(f"{prefix}: {written['status']}, recorded in "
                      f"{os.path.dirname(record)}", flush=True)


def run_grid(config, seeds, command, record_only=False, pretrainer=None):
    """Pre-trains one variant's seeds (`Variant`s of one group) as one program
    (`pretrain_grid`), unless they are finished; then writes each run's `run_config.json`
    (as `pretrain` writes it) and its record. A study's grid keeps no backups (each block
    would write every seed's weights and optimizer state, time a window's budget does not
    hold): the folders of an unfinished one (a stopped window) are started anew.
    `pretrainer`: the grid built ahead (`pretrain_grid`'s), or None."""
    from keras_tupe.layers.utils import INITIALIZATION
    from keras_tupe.pretraining import pretrain_grid

    prefix = f"[{config['study']}] {seeds[0].group} seeds {[v.seed for v in seeds]}"
    if not record_only and not all(v.is_finished for v in seeds):
        for v in (v for v in seeds if os.path.isdir(v.run_dir)):
            print(f"{prefix}: {v.run_dir} unfinished, started anew", flush=True)
            shutil.rmtree(v.run_dir)
        print(f"{prefix}: pre-training {seeds[0].preset} as one program -> "
              f"{os.path.dirname(seeds[0].run_dir)}", flush=True)
        base = study_config.pretrain_config(config, seeds[0])
        pretrain_grid(grid_config(config, seeds), [v.seed for v in seeds],
                      steps_per_dispatch=config["grid"].get("steps_per_dispatch", 100),
                      pretrainer=pretrainer, backups=False)
        for v in seeds:
            records.write_json(os.path.join(v.run_dir, records.RUN_RECORD), {
                "config": dataclasses.replace(base, out=v.run_dir, seed=v.seed).resume_key(),
                "vocabulary_sha256": file_sha256(os.path.join(v.run_dir, "vocab.txt")),
                "command": command, "versions": records.machine(), "replicas": 1,
                "initialization": INITIALIZATION, "grid": {
                    **config["grid"], "program": "keras_tupe.pretraining.pretrain_grid"}})
    for v in seeds:
        written = write_record(config, v)
        print(f"{prefix}: {v.name} " + (f"{written['status']}, recorded" if written
                                        else "no finished run to record"), flush=True)


def grid_config(config, seeds):
    """The `PretrainConfig` a grid of one variant's seeds trains (`pretrain_grid`'s): the
    first seed's, its `out` the variant's folder (the seeds' folders go in it), without a
    validation loss (a window's budget is calibrated on training steps alone)."""
    return dataclasses.replace(study_config.pretrain_config(config, seeds[0]),
                               out=os.path.dirname(seeds[0].run_dir), valid_shards=None)


def write_record(config, variant):
    """Copies a run's log and settings into its record folder; returns the record, or None
    for a run that has no folder (not started, or stopped before its first backup)."""
    run_config = records.read_json(os.path.join(variant.run_dir, records.RUN_RECORD))
    if run_config is None:
        return None
    rows, wall = records.read_metrics(variant.run_dir)
    step = rows[-1]["step"] if rows else 0
    folder = records.record_dir(config, variant.name)
    os.makedirs(folder, exist_ok=True)
    if rows:
        shutil.copyfile(os.path.join(variant.run_dir, "metrics.csv"),
                        os.path.join(folder, "metrics.csv"))
    if variant.is_finished:
        status = "finished"
    elif step == config["settings"]["steps"]:  # trained elsewhere; its models did not come back
        status = "trained all its steps; the final model is not in its run folder"
    else:
        status = f"stopped at step {step}"
    record = {**run_config, "status": status, "last_step": step, "wall_seconds": wall,
              "backbone_config": study_config.run_backbone_config(variant.run_dir),
              "vocabulary": records.read_json(
                  study_config.vocabulary_record_path(config["vocabulary"]))}
    records.write_json(os.path.join(folder, records.RUN_RECORD), record)
    return record


# === Fine-tuning: GLUE (or SQuAD) on the pre-trained checkpoints ===

SETTINGS_FILE = "finetune_settings.json"


def run_finetune(config, command, report_command, only_variants=None, only_checkpoints=None,
                 steps_per_execution=1):
    """Fine-tunes every planned checkpoint whose grid has not run (resumable); then writes
    the report, which names `report_command` as the command that regenerates it.
    `steps_per_execution`: a speed setting, not pinned with the study's settings."""
    import keras

    from experiments.floors import record_floors
    from experiments.report_finetuning import finetune_pages
    from keras_tupe.finetuning import run_protocol, run_squad_protocol

    chosen = protocol(config)
    jobs = [job for job in finetune_plan(config, only_variants, only_checkpoints) if any(
        chosen.runs_to_do(records.read_jsonl(os.path.join(job["out"], "results.jsonl")), task)
        for task in config["tasks"])]
    require_models(job["init"] for job in jobs)
    for job in jobs:
        settings = {"init": job["init"], "vocab": job["vocab"], "lowercase": job["lowercase"],
                    "data_dir": config.get("data_dir"), "settings": config["settings"]}
        settings.update({key: config[key] for key in ("task_settings", "squad_file")
                         if config.get(key)})  # absent: older records still match
        settings_path = os.path.join(job["out"], SETTINGS_FILE)
        pinned = records.read_json(settings_path)
        if pinned is not None and {k: pinned.get(k) for k in settings} != settings:
            raise StudyError(
                f"{job['out']} holds results fine-tuned with other settings ({settings_path}: "
                f"{ {k: pinned.get(k) for k in settings} }, now {settings}). Move it away "
                "or restore the config.")
        if pinned is None:
            records.write_json(settings_path, {
                **settings, "init_sha256": tree_sha256(job["init"]), "command": command,
                "created": records.now(), "versions": records.machine()})
        print(f"[{config['study']}] {job['pretrain_study']}/{job['variant']} step {job['step']}: "
              f"{config['tasks']} x lr {config['learning_rates']} x seeds {config['seeds']}",
              flush=True)
        keras.backend.clear_session()
        # With the study's `grid`, each task's rates x seeds as one program (JAX).
        protocol_config, run = protocol_settings(config, [job], **(
            {} if config.get("grid") else {"steps_per_execution": steps_per_execution}))
        if is_squad(config):
            run_squad_protocol(protocol_config, run)
        else:
            run_protocol(protocol_config, run, task_settings=config.get("task_settings"))
    record_floors([config], missing_only=True)  # the data is here; `report` reads only records
    return finetune_pages(config, report_command)


# === Length generalization (Huang Table 4): masked-LM loss at longer sequences ===

def run_length(config, command, report_command, only_variants=None):
    """Evaluates every planned model at the lengths its record lacks (resumable); then the
    unigram reference and the report."""
    import keras
    import keras_hub

    from experiments.length_study import Batches, masked_lm_loss, note, unigram_rows

    path = length_results(config)
    done = {length_key(row) for row in records.read_jsonl(path)}
    jobs = []
    for job in length_plan(config, only_variants):
        job["todo"] = [n for n in config["lengths"]
                       if (job["pretrain_study"], job["variant"], job["step"], n) not in done]
        jobs += [job] if job["todo"] else []
    require_models(job["model"] for job in jobs)
    batches = Batches(config)
    for job in jobs:
        keras.backend.clear_session()
        model = keras_hub.models.MaskedLM.from_preset(job["model"], preprocessor=None)
        for length in job["todo"]:
            start = time.perf_counter()
            ok, why = note(model.backbone, length, job["trained_seq_len"])
            row = {k: job[k] for k in ("pretrain_study", "variant", "preset", "step",
                                       "trained_seq_len")}
            row.update(length=length, batch_size=config["tokens_per_batch"] // length,
                       batches=config["batches"], loss=None, accuracy=None, masked_tokens=None,
                       note=why)
            if ok:
                loss, accuracy, tokens = masked_lm_loss(model, batches.get(job, length))
                row.update(loss=loss, accuracy=accuracy, masked_tokens=tokens)
            row.update(seconds=time.perf_counter() - start, command=command)
            records.append_jsonl(path, row)
            shown = "n/a" if row["loss"] is None else f"{row['loss']:.4f}"
            print(f"[{config['study']}] {job['pretrain_study']}/{job['variant']} step "
                  f"{job['step']} length {length}: loss {shown} {why}", flush=True)
    on_disk = [job for job in length_plan(config) if os.path.exists(job["vocab"])]
    if on_disk:  # the reference is scored on the batches of a model's vocabulary
        unigram_rows(config, on_disk[0], batches, done, path, command)
    return length_pages(config, report_command)


if __name__ == "__main__":
    sys.exit(main())

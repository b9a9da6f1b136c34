"""Pre-training studies: every variant trained identically, each run recorded.

`run_study` trains the variants of a config one after the other, each in its own
resumable run folder `<runs_dir>/<study>/<variant>` (`keras_tupe.pretraining`: a run
stopped and started again continues from its last backup and ends with the same
weights). When a run finishes or stops (Ctrl-C, SIGTERM, `until_step`), and when a
finished run is skipped, its record is written to `<results_dir>/records/<study>/
<variant>/`: `metrics.csv` (the run's log) and `run_config.json` (the run's own
`run_config.json` with its status, wall time, encoder config and vocabulary record).

`experiments.report` reads those records alone, checks that the runs were trained
identically, and writes the study's pages.
"""

import dataclasses
import os
import shutil

from experiments import config as study_config
from experiments import records
from experiments.config import StudyError

RECORD = "run_config.json"


def run_study(config, command, only=None, verbose=2, until_step=None, record_only=False,
              steps_per_execution=1):
    """Trains (or resumes, or skips) every selected variant, writing each one's record;
    with `record_only`, writes the records of the run folders there are and trains nothing.
    `steps_per_execution` is a speed setting (`PretrainConfig`'s), not one of the study's."""
    import keras

    from keras_tupe.pretraining import pretrain

    selected = _select(config, only)
    study_config.ensure_vocabulary(config, command=command)
    if record_only:
        for variant in selected:
            written = write_record(config, variant)
            print(f"[{config['study']}] {variant.name}: "
                  + (f"{written['status']}, recorded" if written else "no run folder"), flush=True)
        return
    for variant in selected:
        prefix = f"[{config['study']}] {variant.name}"
        record = os.path.join(records.record_dir(config, variant.name), RECORD)
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


def _select(config, only):
    all_variants = study_config.variants(config)
    names = [v.name for v in all_variants]
    unknown = sorted(set(only or ()) - set(names))
    if unknown:
        raise StudyError(f"{config['_path']} has no variant(s) {unknown}. Variants: {names}")
    return [v for v in all_variants if not only or v.name in only]


def write_record(config, variant):
    """Copies a run's log and settings into its record folder; returns the record, or None
    for a run that has no folder (not started, or stopped before its first backup)."""
    run_config = records.read_json(os.path.join(variant.run_dir, RECORD))
    if run_config is None:
        return None
    rows, wall = records.read_metrics(variant.run_dir)
    step = rows[-1]["step"] if rows else 0
    folder = records.record_dir(config, variant.name)
    os.makedirs(folder, exist_ok=True)
    if rows:
        shutil.copyfile(os.path.join(variant.run_dir, "metrics.csv"),
                        os.path.join(folder, "metrics.csv"))
    record = {**run_config, "status": _status(config, variant, step), "last_step": step,
              "wall_seconds": wall,
              "backbone_config": study_config.run_backbone_config(variant.run_dir),
              "vocabulary": records.read_json(
                  study_config.vocabulary_record_path(config["vocabulary"]))}
    records.write_json(os.path.join(folder, RECORD), record)
    return record


def _status(config, variant, step):
    if variant.is_finished:
        return "finished"
    if step == config["settings"]["steps"]:  # trained elsewhere; its models did not come back
        return "trained all its steps; the final model is not in its run folder"
    return f"stopped at step {step}"

"""The fine-tuning study (TUPE Table 2 at small scale): GLUE on pre-trained checkpoints.

For every variant of the named pre-training studies and every checkpoint fraction of
the config (e.g. 0.5 and 1.0 of the budget), `run_study` runs
`keras_tupe.finetuning.run_protocol` with the config's reduced grid (the same learning
rates, seeds, epochs and data for every encoder). Its output folder is the job's
committed record, `<results_dir>/records/<study>/<pretrain study>/<variant>/
step_NNNNNNN/`: the protocol appends each finished (task, learning rate, seed) to
`results.jsonl` there, so a stopped study continues where it was, in this checkout or
the next, and a job whose grid has run needs no checkpoint; `finetune_settings.json`
pins the settings, so a changed config cannot mix its results with older ones. The grid
is not pinned: each row names its learning rate and seed and the report reads only the
config's grid, so a moved or widened grid reuses the runs it shares.

`experiments.report` (also run at the end of `run_study`) writes the study's pages from
these records alone.
"""

import os

from experiments import config as study_config
from experiments import records
from experiments.config import StudyError
from experiments.floors import record_floors
from experiments.report import finetune_pages, is_squad, protocol
# The jobs and their record folders: the report reads them too (stage.py imports `plan`).
from experiments.report import finetune_plan as plan

SETTINGS_FILE = "finetune_settings.json"


def _settings(config, job):
    pinned = {"init": job["init"], "vocab": job["vocab"], "lowercase": job["lowercase"],
              "data_dir": config.get("data_dir"), "settings": config["settings"]}
    for key in ("task_settings", "squad_file"):  # absent: older records still match
        if config.get(key):
            pinned[key] = config[key]
    return pinned


def run_study(config, command, report_command, only_variants=None, only_checkpoints=None,
              steps_per_execution=1):
    """Fine-tunes every planned checkpoint whose grid has not run (resumable); then writes
    the report, which names `report_command` as the command that regenerates it.
    `steps_per_execution`: a speed setting, not pinned with the study's settings."""
    import keras

    from keras_tupe.files import tree_sha256
    from keras_tupe.finetuning import run_protocol, run_squad_protocol

    chosen = protocol(config)
    jobs = [job for job in plan(config, only_variants, only_checkpoints) if any(
        chosen.runs_to_do(records.read_jsonl(os.path.join(job["out"], "results.jsonl")), task)
        for task in config["tasks"])]
    study_config.require_models(job["init"] for job in jobs)
    for job in jobs:
        settings = _settings(config, job)
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
        if is_squad(config):
            run_squad_protocol(job["init"], job["out"], protocol=chosen,
                               vocab=job["vocab"], lowercase=job["lowercase"],
                               offline_split=config["squad_file"], **config["settings"],
                               steps_per_execution=steps_per_execution)
        else:
            run_protocol(config["tasks"], job["init"], job["out"], protocol=chosen,
                         vocab=job["vocab"], lowercase=job["lowercase"],
                         data_dir=config.get("data_dir"),
                         task_settings=config.get("task_settings"), **config["settings"],
                         steps_per_execution=steps_per_execution)
    record_floors([config], missing_only=True)  # the data is here; `report` reads only records
    return finetune_pages(config, report_command)

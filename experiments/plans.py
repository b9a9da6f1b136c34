"""What a fine-tuning or length study runs: its plan, read from the study's config alone.

The runner (`experiments.run`), the length study's batches (`experiments.length_study`) and
the GPU stages (`experiments.stage`, `experiments.stage.budget`) plan from here, and the report
(`experiments.report_finetuning`, `experiments.report_length`) lays its pages out by the same
plan: a job's record folder, its checkpoint, its vocabulary. Nothing here reads a record or
imports Keras.
"""

import os

from experiments import config as study_config
from experiments import records
from experiments.config import StudyError
from keras_tupe_base.settings import FinetuneConfig, ProtocolConfig, SquadConfig

# The length study's context-free reference, a row of its table.
UNIGRAM = {"pretrain_study": "baseline", "variant": "unigram", "preset": "(no model)",
           "step": 0, "final": True}


def tokens_per_step(config):
    """The tokens of one training step of a pre-training study."""
    return config["settings"]["batch_size"] * config["settings"]["seq_len"]


# === A fine-tuning study: its checkpoints and protocol ===

def finetune_plan(config, only_variants=None, only_checkpoints=None):
    """Every (pre-trained checkpoint, record folder) the study fine-tunes."""
    wanted = config.get("variants")  # every name of `checkpoint_variants` is fine-tuned
    known = {(p["study"], v.name) for p in study_config.related_configs(
        config, "pretrain_configs") for v in study_config.variants(p)
        if not wanted or v.name in wanted}
    for key, names in config.get("checkpoint_variants", {}).items():
        for name in names:
            study, _, variant = name.rpartition("/")
            if not ((study, variant) in known if study else any(v == variant for _, v in known)):
                choices = sorted({v for _, v in known} | {f"{s}/{v}" for s, v in known})
                raise StudyError(f"{config['_path']}: `checkpoint_variants` {key}: no variant "
                                 f"{name!r} among the fine-tuned ones. Valid: {choices}")
    jobs = [{"pretrain_study": pretrain["study"], "variant": variant.name,
             "preset": variant.preset, "step": step, "init": init,
             "vocab": os.path.join(variant.run_dir, "vocab.txt"),
             "lowercase": pretrain["vocabulary"]["lowercase"],
             "out": records.record_dir(config, pretrain["study"], variant.name,
                                       f"step_{step:07d}")}
            for pretrain, variant, step, init in study_config.checkpoints(
                config, only_variants, only_checkpoints)]
    if not jobs:
        raise StudyError(f"{config['_path']}: nothing to fine-tune with these filters.")
    return jobs


def protocol(config):
    """The study's `keras_tupe.finetuning.Protocol`."""
    from keras_tupe.finetuning import Protocol

    return Protocol.from_config(config)


def protocol_settings(config, jobs, tasks=None, grid=None, **run_settings):
    """What `run_protocol` (or `run_squad_protocol`) takes for the first of `jobs` (the
    others trained beside it: `together`): the `ProtocolConfig` (`tasks`, default the
    study's; the job's record folder; the study's rates, seeds and choice; `grid`: a dict
    of the grid's settings, which trains each task's runs as one program, default the
    study's, where an empty or absent one trains run by run) and the run's
    `FinetuneConfig` (or `SquadConfig`: the job's encoder, vocabulary and case, the
    study's settings and data, and `run_settings`)."""
    tasks = tasks or config["tasks"]
    grid = (config.get("grid") or None) if grid is None else grid
    job = jobs[0]
    protocol_config = ProtocolConfig(
        tasks=list(tasks), out=job["out"], learning_rates=list(config["learning_rates"]),
        seeds=list(config["seeds"]), selection_seed=config.get("selection_seed"),
        edge_learning_rates=list(config.get("edge_learning_rates") or []), grid=grid is not None,
        **(grid or {}))
    common = dict(init=job["init"], vocab=job["vocab"], lowercase=job["lowercase"],
                  **config["settings"], **run_settings)
    run = (SquadConfig(offline_split=config["squad_file"], **common) if is_squad(config) else
           FinetuneConfig(task=tasks[0], data_dir=config.get("data_dir"), **common))
    return protocol_config, run


def is_squad(config):
    """A SQuAD study: `tasks` is `["squad"]`, fine-tuned on an article split of `squad_file`."""
    return config["tasks"] == ["squad"]


# === A length study: its checkpoints, each with what its evaluation needs ===

def masking(settings):
    """The masking rates of a pre-training study's `settings`."""
    return {k: settings.get(k, default) for k, default in (
        ("mask_rate", 0.15), ("mask_token_rate", 0.8), ("random_token_rate", 0.1))}


def length_plan(config, only_variants=None):
    """Every checkpoint the length study evaluates, with what its evaluation needs."""
    jobs = []
    for pretrain, variant, step, path in study_config.checkpoints(config, only_variants):
        settings = pretrain["settings"]
        jobs.append({"pretrain_study": pretrain["study"], "variant": variant.name,
                     "preset": variant.preset, "overrides": variant.overrides, "step": step,
                     "final": step == settings["steps"], "model": path,
                     "vocab": os.path.join(variant.run_dir, "vocab.txt"),
                     "lowercase": pretrain["vocabulary"]["lowercase"],
                     "trained_seq_len": settings["seq_len"],
                     "tokens_per_step": tokens_per_step(pretrain),
                     "pretrain_record": records.record_dir(pretrain, variant.name),
                     "masking": masking(settings)})
    if not jobs:
        raise StudyError(f"{config['_path']}: nothing to evaluate with these filters.")
    return jobs


def length_results(config):
    """The length study's record: one (checkpoint, length) a line."""
    return os.path.join(records.record_dir(config), "results.jsonl")


def length_key(row):
    return (row["pretrain_study"], row["variant"], row["step"], row["length"])

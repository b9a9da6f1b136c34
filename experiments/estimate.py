"""How long studies take to run again from scratch, from the times their reports recorded.

`estimate(configs)` gives one row a study:

- a pre-training study: the wall time its report recorded for each run
  (`<study>_config.json`, `runs.<variant>.wall_seconds`); a run with no record of it
  finished (a study not run yet, or a run its report records as unfinished) takes its
  steps at the median seconds a step of the recorded finished runs of the same encoder
  size (those of the studies estimated, or, when none of them has one, those of every
  pre-training config beside it);
- a fine-tuning study: for each planned checkpoint, the recorded wall time a timed
  run (`jobs[].wall_seconds / timed_runs`) times the runs its grid needs; a
  checkpoint with no record takes the median of the recorded ones; a study with no
  record at all takes its training steps (tasks x learning rates x seeds x epochs x
  batches of its training sets) at the median recorded wall seconds a training step of
  the fine-tuning studies beside it (evaluation and compilation included, padding not
  modelled);
- a length study: the seconds its report recorded (every evaluated row, summed).

The records come from whatever machine made them (the 2-core CPU of this project:
2,045 to 4,560 tokens/s were measured on different days), so the estimate is that
of a machine as fast as the recorded ones, and says which rows were scaled.
"""

import functools
import json
import os
import statistics

from experiments import config as study_config
from experiments import records
from experiments.pretrain_study import is_finished


def _record(config):
    path = os.path.join(config["results_dir"], f"{config['study']}_config.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _finished_wall_seconds(run):
    """A report's recorded wall time of a run, or None for a run not finished there: an
    unfinished run's time covers only the steps it made (it is estimated like a run not
    started)."""
    return run.get("wall_seconds") if is_finished(run) else None


def _pretrain_seconds_per_step(configs):
    """`{size: median seconds a step}` over every recorded finished run of the pre-training
    studies."""
    by_size = {}
    for config in configs:
        runs = (_record(config) or {}).get("runs", {})
        for run in runs.values():
            wall = _finished_wall_seconds(run)
            if wall:
                by_size.setdefault(config["size"], []).append(
                    wall / config["settings"]["steps"])
    return {size: statistics.median(values) for size, values in by_size.items()}


def _configs_beside(configs, kind):
    """Every study config of `kind` in the folders of `configs` (other kinds skipped)."""
    found = []
    for folder in sorted({os.path.dirname(os.path.abspath(c["_path"])) for c in configs}):
        for name in sorted(os.listdir(folder)):
            if name.endswith(".json"):
                try:
                    found.append(study_config.load_config(os.path.join(folder, name),
                                                          kind=kind))
                except study_config.StudyError:  # another kind, or broken: not a record
                    continue
    return found


@functools.lru_cache(maxsize=None)
def _train_examples(task, data_dir):
    from keras_tupe.data import glue

    return len(glue.load_glue(task, "train", data_dir))


def _finetune_steps(config):
    """Training steps of one (learning rate, seed) over the study's GLUE tasks."""
    from keras_tupe.finetuning.glue import paper_epochs

    steps = 0
    for task in config["tasks"]:
        settings = {**config["settings"], **config.get("task_settings", {}).get(task, {})}
        examples = _train_examples(task, config.get("data_dir"))
        if settings.get("max_train_examples"):
            examples = min(examples, settings["max_train_examples"])
        epochs = settings.get("epochs") or paper_epochs(task)  # None: the paper's
        steps += epochs * -(-examples // settings.get("batch_size", 32))
    return steps


def _finetune_seconds_per_step(config):
    """Median wall seconds a training step over the recorded GLUE studies beside `config`."""
    values = []
    for other in _configs_beside([config], "finetune"):
        record = _record(other) or {}
        timed = [j for j in record.get("jobs", []) if j.get("timed_runs")]
        if not timed or other["tasks"] == ["squad"]:
            continue
        steps = _finetune_steps(other) / len(other["tasks"])  # a run: one task
        values += [j["wall_seconds"] / j["timed_runs"] / steps for j in timed]
    if not values:
        raise study_config.StudyError(
            f"{config['_path']}: no recorded fine-tuning time to estimate from.")
    return statistics.median(values)


def parse_spec(text):
    """`"STUDY[:VARIANT,...][@STEPS]"` -> `(study, [variants] or None, steps or None)`."""
    from experiments.config import StudyError

    study, _, steps = text.partition("@")
    study, _, variants = study.partition(":")
    if steps and not steps.isdigit():
        raise StudyError(f"estimate {text}: the step after @ must be a whole number, e.g. "
                         "speed_f32_xla:bert_a@300.")
    return study, (variants.split(",") if variants else None), (int(steps) if steps else None)


def estimate(configs, only=None, until_steps=None):
    """One row a config: `{"study", "kind", "runs", "seconds", "basis"}`, in the given order.

    `configs` are loaded study configs; the pre-training ones among them (and those
    the fine-tuning and length studies name) give the seconds a step of runs not
    recorded yet. `only[i]` (variant names) and `until_steps[i]` restrict the i-th
    pre-training study as `pretrain --variants ... --until-step N` does; a run not
    recorded at that length takes that share of its recorded time.
    """
    only = only or [None] * len(configs)
    until_steps = until_steps or [None] * len(configs)
    pretrain_configs = [c for c in configs if c["kind"] == "pretrain"]
    for config in configs:
        if config["kind"] != "pretrain":
            pretrain_configs += study_config.related_configs(config, "pretrain_configs")
    per_step = _pretrain_seconds_per_step(pretrain_configs)
    sizes = {c["size"] for c in configs if c["kind"] == "pretrain"}
    beside = sizes - set(per_step)  # sizes none of them recorded: from the configs beside them
    if beside:
        per_step = {**_pretrain_seconds_per_step(_configs_beside(configs, "pretrain")),
                    **per_step}
    rows = []
    for config, names, until in zip(configs, only, until_steps):
        kind, record = config["kind"], _record(config) or {}
        if kind == "pretrain":
            selected = [v for v in study_config.variants(config) if not names or v.name in names]
            unknown = set(names or ()) - {v.name for v in selected}
            if unknown:
                raise study_config.StudyError(
                    f"estimate {config['study']}: no variant {sorted(unknown)}; the study has "
                    f"{', '.join(config['variants'])}.")
            steps = config["settings"]["steps"]
            share = min(until, steps) / steps if until else 1.0
            seconds, scaled = 0.0, []
            recorded = record.get("runs", {})
            for variant in selected:
                wall = _finished_wall_seconds(recorded.get(variant.name, {}))
                if wall is None:
                    if config["size"] not in per_step:
                        raise study_config.StudyError(
                            f"{config['_path']}: no recorded run of size {config['size']!r} "
                            "to estimate its time from.")
                    wall = per_step[config["size"]] * steps
                    scaled.append(variant.name)
                seconds += wall * share
            runs = len(selected)
            basis = ("recorded wall times" if not scaled else
                     f"{', '.join(scaled)} not recorded: {steps} steps at "
                     f"{per_step[config['size']]:.2f} s a step (median of the recorded "
                     f"{config['size']} runs"
                     + (" of every config beside it)" if config["size"] in beside else ")"))
            if until:
                basis += f", to step {until} of {steps}"
        elif kind == "finetune":
            from experiments import finetune_study

            jobs = finetune_study.plan(config)
            grid = (len(config["tasks"]) * len(config["learning_rates"])
                    * len(config["seeds"]))
            timed = {(j["pretrain_study"], j["variant"], int(j["step"])):
                     j["wall_seconds"] / j["timed_runs"]
                     for j in record.get("jobs", []) if j.get("timed_runs")}
            runs = len(jobs) * grid
            if not timed and finetune_study.is_squad(config):
                raise study_config.StudyError(
                    f"{config['_path']}: no recorded SQuAD fine-tuning time to estimate from "
                    "(its first runs record one: `report` after a few).")
            if not timed:
                step_seconds = _finetune_seconds_per_step(config)
                steps = _finetune_steps(config)
                seconds = len(jobs) * len(config["learning_rates"]) * len(config["seeds"]) \
                    * steps * step_seconds
                rows.append({"study": config["study"], "kind": kind, "runs": runs,
                             "seconds": seconds, "basis": (
                                 f"not recorded: {len(jobs)} checkpoints x {steps:,} training "
                                 f"steps a grid point at {step_seconds:.2f} s a step (median of "
                                 "the recorded fine-tuning studies beside it)")})
                continue
            fallback = statistics.median(timed.values())
            keys = [(j["pretrain_study"], j["variant"], int(j["step"])) for j in jobs]
            seconds = sum(timed.get(key, fallback) * grid for key in keys)
            missing = [f"{k[0]}/{k[1]}@{k[2]}" for k in keys if k not in timed]
            basis = (f"recorded seconds a run x {grid} runs a checkpoint" if not missing else
                     f"{', '.join(missing)} not recorded: the median recorded checkpoint")
        else:
            if record.get("seconds") is None:
                raise study_config.StudyError(
                    f"{config['_path']}: no recorded evaluation time to estimate from.")
            seconds, runs, basis = record["seconds"], len(record.get("evaluated", [])), \
                "recorded evaluation seconds"
        rows.append({"study": config["study"], "kind": kind, "runs": runs,
                     "seconds": seconds, "basis": basis})
    return rows


def format_estimate(rows):
    """The rows as a table and a total, for a person about to start them."""
    width = max(len(r["study"]) for r in rows)
    lines = [f"{'study':<{width}}  {'kind':<8}  {'runs':>4}  {'time':>12}  basis"]
    for r in rows:
        lines.append(f"{r['study']:<{width}}  {r['kind']:<8}  {r['runs']:>4}  "
                     f"{records.format_seconds(r['seconds']):>12}  {r['basis']}")
    total = sum(r["seconds"] for r in rows)
    lines.append(f"total: {records.format_seconds(total)} ({total / 3600:.1f} h) on a machine as "
                 "fast as the recorded runs'")
    return "\n".join(lines)

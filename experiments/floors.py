"""`python -m experiments.floors`: the majority-class floor of every GLUE task that a
fine-tuning study of `experiments/studies.json` names, computed once from the study's GLUE
dev sets (its `data_dir`) into `docs/results/records/majority_class.json`, the record the
fine-tuning tables read; `report` then needs the committed records alone. `finetune` adds the
floor of a task the record lacks (`record_floors`)."""

import argparse
import os

import numpy as np

from experiments import config as study_config
from experiments import records
from experiments.config import StudyError

FLOORS_RECORD = "majority_class.json"
FLOORS_COMMAND = "python -m experiments.floors"


def floors_path(config):
    """`<results_dir>/records/majority_class.json`: the floors of the study's results."""
    return os.path.join(config["results_dir"], "records", FLOORS_RECORD)


def has_floor(task):
    """Whether one constant answer has a score on `task`: not for STS-B (a regression: a
    constant has no correlation) or SQuAD (span extraction)."""
    from keras_tupe.data import glue

    return task != "squad" and glue.get_task(task).num_classes > 1


def majority_floors(task, data_dir):
    """The record of one task's floors, from its dev sets in `data_dir`: per metric, the best
    dev value (x100) of one constant answer (accuracy: the dev majority label's share;
    Matthews correlation: 0; MRPC's F1: always answering "paraphrase"), the mean over the
    task's dev splits (MNLI's two), and the label counts it came from."""
    from keras_tupe.data import glue
    from keras_tupe.metrics import glue_metrics

    spec = glue.get_task(task)
    devs = {split: glue.load_glue(task, split, data_dir) for split in spec.eval_splits}
    floors = {}
    for label in range(spec.num_classes):
        scores = [glue_metrics(task, np.full(len(dev), label), dev.labels)
                  for dev in devs.values()]
        for metric in scores[0]:
            value = 100 * float(np.mean([score[metric] for score in scores]))
            floors[metric] = max(floors.get(metric, value), value)
    return {"data_dir": data_dir, "floors": floors,
            "dev_labels": {split: np.bincount(dev.labels, minlength=spec.num_classes).tolist()
                           for split, dev in devs.items()}}


def record_floors(configs, missing_only=False):
    """Writes the floors of every task of `configs` (fine-tuning studies) that has one into
    each study's `floors_path`, from the study's `data_dir` (`missing_only`: only the tasks
    the record lacks); returns the paths written."""
    written = {}
    for config in configs:
        path = floors_path(config)
        tasks = dict((written.get(path) or records.read_json(path) or {}).get("tasks", {}))
        for task in config["tasks"]:
            if has_floor(task) and not (missing_only and task in tasks):
                tasks[task] = majority_floors(task, config.get("data_dir"))
        written[path] = {
            "command": FLOORS_COMMAND,
            "about": ("Per GLUE task and metric, the best dev score (x100) of one constant "
                      "answer: the floor of the fine-tuning tables, which `python -m "
                      "experiments.run report` reads from here; made from the dev sets by "
                      "the command."),
            "tasks": dict(sorted(tasks.items()))}
    return [records.write_json(path, record) for path, record in written.items()]


def majority_class(config, only_task=None, metric=None):
    """The best dev score (x100) of one constant answer, per task: the floor that a
    classifier ignoring its input can reach, read from the study's floors record
    (`floors_path`). With `only_task` and `metric`, that task's best value of that metric
    instead (e.g. MRPC's F1 of always answering "paraphrase").

    STS-B, a regression, and SQuAD, span extraction, get None: a constant has no score.
    Raises `StudyError` when the record lacks a task.
    """
    from keras_tupe.metrics import glue_score_metric

    path = floors_path(config)
    floors = (records.read_json(path) or {}).get("tasks", {})
    scores = {}
    for task in [only_task] if only_task else config["tasks"]:
        if not has_floor(task):
            scores[task] = None
        elif task not in floors:
            raise StudyError(f"{path} holds no majority-class floor of {task}: make it from "
                             f"the GLUE dev sets with `{FLOORS_COMMAND}`.")
        else:
            scores[task] = floors[task]["floors"][metric or glue_score_metric(task)]
    return scores[only_task] if only_task else scores


def main(argv=None):
    argparse.ArgumentParser(prog="python -m experiments.floors", description=__doc__).parse_args(
        argv)
    configs = [study_config.load_config(name) for name, entry in study_config.studies().items()]
    for path in record_floors([c for c in configs if c["kind"] == "finetune"]):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

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

`report` (also run at the end of `run_study`) writes `<study>_glue.csv` and
`<study>_table.md` (per task the median over seeds at the best learning rate, and the
average, as the papers report, with each task's majority-class score: the floor an
encoder must clear) and `<study>_config.json`, from the records alone. The two studies
fine-tuned before runs were recorded one by one (`finetune`, `finetune_intermediate`)
keep each job's summary in `summary.json` instead.
"""

import json
import os

import numpy as np

from experiments import config as study_config
from experiments import records
from experiments.config import StudyError

TASK_NAMES = {"squad": "SQuAD F1 (EM)",
              "cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "rte": "RTE",
              "qnli": "QNLI", "mnli": "MNLI", "qqp": "QQP", "wnli": "WNLI"}
SETTINGS_FILE = "finetune_settings.json"
SUMMARY_FILE = "summary.json"


def plan(config, only_variants=None, only_checkpoints=None):
    """Every (pre-trained checkpoint, record folder) the study fine-tunes."""
    _check_chosen_variants(config)
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


def _check_chosen_variants(config):
    """Every name in `checkpoint_variants` is a fine-tuned variant (of the study it names)."""
    wanted = config.get("variants")
    known = {(p["study"], v.name) for p in study_config.related_configs(
        config, "pretrain_configs") for v in study_config.variants(p)
        if not wanted or v.name in wanted}
    for key, names in config.get("checkpoint_variants", {}).items():
        for name in names:
            study, _, variant = name.rpartition("/")
            found = (study, variant) in known if study else any(v == variant for _, v in known)
            if not found:
                choices = sorted({v for _, v in known} | {f"{s}/{v}" for s, v in known})
                raise StudyError(f"{config['_path']}: `checkpoint_variants` {key}: no variant "
                                 f"{name!r} among the fine-tuned ones. Valid: {choices}")


def _protocol(config):
    from keras_tupe.finetuning import Protocol

    return Protocol.from_config(config)


def _runs_expected(config, rows):
    """The runs of the protocol when it is complete, from the rows it asks for (with a
    selection seed, of that seed or at the rate it chose)."""
    protocol = _protocol(config)
    return protocol.size(protocol.rows(rows, config["tasks"]), config["tasks"])


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

    protocol = _protocol(config)
    jobs = [job for job in plan(config, only_variants, only_checkpoints) if any(
        protocol.runs_to_do(records.read_jsonl(os.path.join(job["out"], "results.jsonl")), task)
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
            run_squad_protocol(job["init"], job["out"], protocol=protocol,
                               vocab=job["vocab"], lowercase=job["lowercase"],
                               offline_split=config["squad_file"], **config["settings"],
                               steps_per_execution=steps_per_execution)
        else:
            run_protocol(config["tasks"], job["init"], job["out"], protocol=protocol,
                         vocab=job["vocab"], lowercase=job["lowercase"],
                         data_dir=config.get("data_dir"),
                         task_settings=config.get("task_settings"), **config["settings"],
                         steps_per_execution=steps_per_execution)
    record_floors([config], missing_only=True)  # the data is here; `report` reads only records
    return report(config, report_command)


def is_squad(config):
    """A SQuAD study: `tasks` is `["squad"]`, fine-tuned on an article split of `squad_file`."""
    return config["tasks"] == ["squad"]


# The majority-class floors, computed once from the GLUE dev sets (`record_floors`, run by
# `python -m experiments.floors` and by `run_study` for a task not yet in it), so that
# `report` reads the records alone.
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


def job_summary(config, rows):
    """What the table shows of one checkpoint, from its `results.jsonl` rows: per task the
    median over seeds at the best learning rate (`summarize`; with a selection seed, the
    rate it chose), whether its protocol has run to the end (until then the rate, and so
    the score, may change), the medians of the ceiling's other metrics at that rate and,
    for SQuAD, the median exact match there; the runs done and their time (runs
    fine-tuned before runs recorded their time have none and are left out)."""
    protocol = _protocol(config)
    rows = protocol.rows(rows, config["tasks"])
    tasks = {}
    for summary in protocol.summarize(rows, config["tasks"]):
        task, best = summary["task"], summary["best_learning_rate"]
        summary["complete"] = not protocol.runs_to_do(rows, task)
        at_best = [r for r in rows if r["task"] == task and r["learning_rate"] == best]
        if task == "squad":
            summary["exact_match"] = float(np.median([r["dev"]["eval"]["exact_match"]
                                                      for r in at_best]))
        summary["metrics"] = {metric: 100 * float(np.median([
            np.mean([split[metric] for split in r["dev"].values()]) for r in at_best]))
            for metric in _ceiling_metrics(config).get(task, [])}
        tasks[task] = summary
    timed = [r["wall_seconds"] for r in rows if "wall_seconds" in r]
    return {"tasks": tasks, "runs_done": len(rows),
            "runs_expected": _runs_expected(config, rows),
            "wall_seconds": sum(timed) if timed else None, "timed_runs": len(timed),
            "train_seconds": sum(r.get("train_seconds", 0) for r in rows)}


def _ceiling_metrics(config):
    """`{task: [metric, ...]}`: the metrics other than the task's score that the ceiling
    gives, each a column of its own in the table."""
    from keras_tupe.metrics import glue_score_metric

    extra = {task: [metric for metric in value if metric != glue_score_metric(task)]
             for task, value in config.get("ceiling", {}).get("scores", {}).items()
             if isinstance(value, dict)}
    return {task: metrics for task, metrics in extra.items() if metrics}


def report(config, command):
    """Collects every job's record into the study's table, CSV and config record."""
    tasks = config["tasks"]
    csv_rows, table_rows, job_records = [], [], []
    for job in plan(config):
        rows = records.read_jsonl(os.path.join(job["out"], "results.jsonl"))
        summary = (job_summary(config, rows) if rows else
                   records.read_json(os.path.join(job["out"], SUMMARY_FILE))
                   or job_summary(config, []))
        by_task = summary["tasks"]
        complete = {t for t in tasks if by_task.get(t, {}).get("complete")}
        scores = [by_task[t]["score"] if t in by_task else None for t in tasks]
        table_rows.append({
            "job": job, "summary": summary, "scores": scores, "complete": complete,
            "average": sum(scores) / len(scores) if len(complete) == len(tasks) else None})
        csv_rows += [{**{k: job[k] for k in ("pretrain_study", "variant", "step")},
                      **by_task[t], "complete": t in complete,
                      "medians_by_learning_rate": json.dumps(by_task[t][
                          "medians_by_learning_rate"])} for t in tasks if t in by_task]
        summary.setdefault("runs_expected", _runs_expected(config, []))  # a summary.json
        job_records.append({**job, **{k: summary[k] for k in ("runs_done", "runs_expected",
                                "wall_seconds", "timed_runs", "train_seconds")}})
    if not any(row["summary"]["runs_done"] for row in table_rows):
        raise StudyError(f"No fine-tuning result yet for study {config['study']!r}: run "
                         f"python -m experiments.run finetune {' '.join(config['_flag'])}")
    out_dir, study = config["results_dir"], config["study"]
    header = [f"command: {command}", f"study config: {config['_path']}",
              ("score: median over seeds at the best learning rate of the task (x100); "
               if config.get("selection_seed") is None else
               f"score: median over seeds at the rate chosen with seed "
               f"{config['selection_seed']} (x100); ")
              + "Matthews (CoLA), Pearson (STS-B), accuracy (others)"]
    paths = {"csv": records.write_csv(
        os.path.join(out_dir, f"{study}_glue.csv"),
        ("pretrain_study", "variant", "step", "task", "score", "best_learning_rate", "seeds",
         "seed_min", "seed_max", "complete", "medians_by_learning_rate"), csv_rows, header)}
    floor = majority_class(config)
    paths["table"] = records.write_text(os.path.join(out_dir, f"{study}_table.md"), _table(
        config, table_rows, command, floor))
    paths["config"] = records.write_json(os.path.join(out_dir, f"{study}_config.json"), {
        "command": command, "study_config": study_config.resolved(config), "jobs": job_records,
        "majority_class": floor})
    return paths


def _seed_spread(config, table_rows):
    """The table across pre-training seeds: for a variant fine-tuned from the same step
    of several pre-training studies with different seeds (a study and its replicates),
    each task's score per pre-training seed, and the gaps between variants judged
    against that spread. `[]` when no variant has two pre-training seeds."""
    seeds = {p["study"]: p["settings"]["seed"]
             for p in study_config.related_configs(config, "pretrain_configs")}
    groups = {}  # (variant, step) -> {pre-training seed: row}
    for row in table_rows:
        job = row["job"]
        if row["average"] is not None:  # every task complete
            groups.setdefault((job["variant"], job["step"]), {})[
                seeds[job["pretrain_study"]]] = row
    groups = {key: rows for key, rows in groups.items() if len(rows) > 1}
    if not groups:
        return []
    names = [TASK_NAMES.get(t, t) for t in config["tasks"]] + ["average"]

    def scores(row):
        return list(row["scores"]) + [row["average"]]

    lines = ["", ("**Across pre-training seeds.** Each cell: the score of every pre-training "
                  "seed (each the median over the fine-tuning seeds, as above), lowest to "
                  "highest, and their mean in parentheses."), "",
             "| variant | step | pre-training seeds | " + " | ".join(names) + " |",
             "| --- | ---: | --- | " + " | ".join("---:" for _ in names) + " |"]
    for (variant, step), by_seed in groups.items():
        columns = list(zip(*(scores(by_seed[seed]) for seed in sorted(by_seed))))
        label = _encoder({"pretrain_study": None, "variant": variant, "step": step})
        lines.append(f"| {label} | {step} | "
                     + ", ".join(str(seed) for seed in sorted(by_seed)) + " | " + " | ".join(
                         f"{min(c):.2f}–{max(c):.2f} ({np.mean(c):.2f})" for c in columns)
                     + " |")
    pairs = [(a, b) for a in groups for b in groups
             if a < b and a[1] == b[1] and set(groups[a]) == set(groups[b])]
    if pairs:
        lines += ["", ("Gaps between variants fine-tuned from the same step: the mean over the "
                       "pre-training seeds of one minus the other's; `!` marks a gap beyond the "
                       "spread (seed by seed, every difference has the same sign, and the mean "
                       "gap is larger than either variant's range across seeds)."), "",
                  "| pair | step | " + " | ".join(names) + " |",
                  "| --- | ---: | " + " | ".join("---:" for _ in names) + " |"]
        for a, b in pairs:
            cells = []
            for column in range(len(names)):
                by_seed = [(scores(groups[a][s])[column], scores(groups[b][s])[column])
                           for s in sorted(groups[a])]
                diffs = [x - y for x, y in by_seed]
                spread = max(max(v) - min(v) for v in zip(*by_seed))
                beyond = records.beyond_seed_spread(diffs, spread)
                cells.append(f"{np.mean(diffs):+.2f}" + (" !" if beyond else ""))
            lines.append(f"| {a[0]} − {b[0]} | {a[1]} | " + " | ".join(cells) + " |")
    return lines


def grid_edge(rates, best):
    """"↑" when the best learning rate is the grid's highest, "↓" its lowest, else ""."""
    if len(rates) < 2:
        return ""
    return "↑" if best == max(rates) else "↓" if best == min(rates) else ""


def _encoder(job):
    """The table's name of a job's encoder (without its pre-training study when that is
    None); step 0 is the run's random initialization."""
    name = (f"{job['pretrain_study']}/{job['variant']}" if job["pretrain_study"]
            else job["variant"])
    return f"{name}, random init" if job["step"] == 0 else name


METRIC_NAMES = {"f1": "F1", "accuracy": "acc.", "pearson": "Pearson", "spearman": "Spearman",
                "matthews": "Matthews"}


def _protocol_text(config):
    rates, seeds, selection_seed = (config["learning_rates"], config["seeds"],
                                    config.get("selection_seed"))
    settings = (f"settings {json.dumps(config['settings'])}"
                + (f", by task {json.dumps(config['task_settings'])}"
                   if config.get("task_settings") else ""))
    metrics = ("Matthews corr. (CoLA), Pearson (STS-B), accuracy (others); SQuAD: F1, the "
               "learning rate chosen by F1, and in parentheses the median exact match at that "
               "rate. `*`: not all runs of the task are done yet. ")
    if selection_seed is None:
        return (f"Grid, identical for every encoder: learning rates {rates} x seeds {seeds}; "
                f"{settings}. Score: median over the seeds at the task's best learning rate "
                f"(x100); {metrics}↑ / ↓: the best learning rate is the highest / lowest of "
                "the grid, which then does not bracket it (widen the grid).")
    edges = config.get("edge_learning_rates", [])
    return (f"Protocol, identical for every encoder: each task's learning rate is chosen with "
            f"seed {selection_seed} alone among {rates}"
            + (f" (widened by the nearest rate of {edges} while the best is at the edge)"
               if edges else "")
            + f", then seeds {seeds} run at the chosen rate; {settings}. Score: median over "
            f"the {len(seeds)} seeds at the chosen rate (x100); {metrics}↑ / ↓: the chosen "
            "rate is the highest / lowest the protocol may run, which then does not bracket it.")


def _table(config, table_rows, command, floor):
    tasks = config["tasks"]
    rates = list(config["learning_rates"]) + list(config.get("edge_learning_rates", []))
    extra = [(task, metric) for task, metrics in _ceiling_metrics(config).items()
             for metric in metrics]
    names = ([TASK_NAMES.get(t, t) for t in tasks]
             + [f"{TASK_NAMES.get(t, t)} {METRIC_NAMES.get(m, m)}" for t, m in extra])
    lines = [
        (f"# Study `{config['study']}`: SQuAD v1.1, an article split of "
         f"`{config['squad_file']}` (Huang Table 2 at small scale; not the official split)"
         if is_squad(config) else
         f"# Study `{config['study']}`: GLUE dev (TUPE Table 2 at small scale)"),
        "",
        f"Regenerate: `{command}`",
        "",
        *([config["description"], ""] if config.get("description") else []),
        _protocol_text(config),
        "",
        "| encoder | step | " + " | ".join(names) + " | average | runs | time |",
        "| --- | ---: | " + " | ".join("---:" for _ in names) + " | ---: | ---: | ---: |",
    ]
    for row in table_rows:
        job, average, summary = row["job"], row["average"], row["summary"]
        done, wall, timed = summary["runs_done"], summary["wall_seconds"], summary["timed_runs"]
        cells = []
        for task in tasks:
            task_summary = summary["tasks"].get(task)
            if task_summary is None:
                cells.append("–")
                continue
            exact = task_summary.get("exact_match")
            cells.append(f"{task_summary['score']:.2f}"
                         + ("" if exact is None else f" ({exact:.2f})")
                         + grid_edge(rates, task_summary["best_learning_rate"])
                         + ("" if task in row["complete"] else "*"))
        for task, metric in extra:
            value = summary["tasks"].get(task, {}).get("metrics", {}).get(metric)
            cells.append("–" if value is None else f"{value:.2f}"
                         + ("" if task in row["complete"] else "*"))
        lines.append(
            f"| {_encoder(job)} | {job['step']} | " + " | ".join(cells)
            + f" | {'–' if average is None else f'**{average:.2f}**'} | {done}/"
            f"{summary['runs_expected']} | {records.format_seconds(wall)}"
            + ("" if wall is None or timed >= done else f" ({timed} of {done} runs)") + " |")
    if not is_squad(config):
        floor_scores = [floor[t] or 0.0 for t in tasks]
        floor_extra = [majority_class(config, task, metric) for task, metric in extra]
        lines.append("| *majority class* | – | " + " | ".join(
            "(0)" if value is None else f"{value:.2f}"
            for value in [floor[t] for t in tasks] + floor_extra)
            + f" | {sum(floor_scores) / len(tasks):.2f} | – | – |")
    if config.get("ceiling"):
        lines.append(_ceiling_row(config, extra))
    lines += ["", (f"Seed range: the lowest and highest of the {len(config['seeds'])} seeds at "
                   "the learning rate the table reports."), "",
              "| encoder | step | " + " | ".join(TASK_NAMES.get(t, t) for t in tasks) + " |",
              "| --- | ---: | " + " | ".join("---:" for _ in tasks) + " |"]
    for row in table_rows:
        by_task = row["summary"]["tasks"]
        if row["summary"]["runs_done"]:
            lines.append(
                f"| {_encoder(row['job'])} | {row['job']['step']} | " + " | ".join(
                    "–" if t not in by_task else
                    f"{by_task[t]['seed_min']:.1f}–{by_task[t]['seed_max']:.1f}"
                    + ("" if t in row["complete"] else "*") for t in tasks) + " |")
    lines += _seed_spread(config, table_rows)
    lines += ["", ("Time: wall time of the checkpoint's fine-tuning runs in the table (data, "
                   "training and evaluation), summed. Runs fine-tuned before runs recorded their "
                   "own time are not in it; the time then says how many of the runs it covers."),
              *(["", ("*Random init* (step 0): the encoder the pre-training run started "
                      "from, fine-tuned with the same grid: the control that shows what "
                      "pre-training adds.")]
                if any(row["job"]["step"] == 0 for row in table_rows) else []),
              *([] if is_squad(config) else [
                  "", ("*Majority class*: the dev score of always giving the dev set's most "
                       "frequent label, the most a classifier that ignores its input can score. "
                       "For a regression (STS-B) a constant has no correlation; it counts as 0 "
                       "in the average.")]),
              *(["", (f"*Ceiling*: {config['ceiling']['name']}: its published scores, "
                      "for scale (another encoder, data and evaluation; the average only "
                      "where it has every task's score).")]
                if config.get("ceiling") else []), ""]
    return "\n".join(lines)


def _ceiling_row(config, extra):
    from keras_tupe.metrics import glue_score_metric

    scores = config["ceiling"]["scores"]

    def value(task, metric=None):
        given = scores.get(task)
        if isinstance(given, dict):
            return given.get(metric or glue_score_metric(task))
        return given if metric is None else None

    cells = [value(t) for t in config["tasks"]] + [value(t, m) for t, m in extra]
    main = cells[:len(config["tasks"])]
    average = "–" if None in main else f"{sum(main) / len(main):.2f}"
    return ("| *ceiling* | – | " + " | ".join("–" if c is None else f"{c:.1f}" for c in cells)
            + f" | {average} | – | – |")

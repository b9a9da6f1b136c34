"""A fine-tuning study's pages, from the records of its jobs (each job's `results.jsonl`, one
run a line) alone: the table (each task's median at its chosen rate, the majority-class
floor, a ceiling), the CSV and the config record. The jobs are `plans.finetune_plan`'s.
"""

import json
import os

import numpy as np

from experiments import config as study_config
from experiments import floors, records
from experiments.config import StudyError
from experiments.pages import markdown_table, page_header, paragraph, prose, write_pages
from experiments.plans import finetune_plan, is_squad, protocol

TASK_NAMES = {"squad": "SQuAD F1 (EM)", "cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC",
              "stsb": "STS-B", "rte": "RTE", "qnli": "QNLI", "mnli": "MNLI", "qqp": "QQP",
              "wnli": "WNLI"}
METRIC_NAMES = {"f1": "F1", "accuracy": "acc.", "pearson": "Pearson", "spearman": "Spearman",
                "matthews": "Matthews"}


def job_summary(config, rows):
    """What the table shows of one checkpoint, from its `results.jsonl` rows: per task
    `Protocol.summarize` and whether it is complete, the ceiling's other metrics and
    SQuAD's exact match at the chosen rate; the runs done and their time."""
    chosen = protocol(config)
    rows = chosen.rows(rows, config["tasks"])
    tasks = {}
    for summary in chosen.summarize(rows, config["tasks"]):
        task, best = summary["task"], summary["best_learning_rate"]
        summary["complete"] = not chosen.runs_to_do(rows, task)
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
            "runs_expected": chosen.size(rows, config["tasks"]),
            "wall_seconds": sum(timed) if timed else None, "timed_runs": len(timed),
            "train_seconds": sum(r.get("train_seconds", 0) for r in rows)}


def _ceiling_metrics(config):
    """`{task: [metric, ...]}`: the ceiling's metrics other than the task's score, each a
    column of its own."""
    from keras_tupe.metrics import glue_score_metric

    extra = {task: [metric for metric in value if metric != glue_score_metric(task)]
             for task, value in config.get("ceiling", {}).get("scores", {}).items()
             if isinstance(value, dict)}
    return {task: metrics for task, metrics in extra.items() if metrics}


def finetune_pages(config, command):
    """Collects every job's record into the study's table, CSV and config record."""
    tasks = config["tasks"]
    csv_rows, table_rows, job_records = [], [], []
    for job in finetune_plan(config):
        summary = job_summary(config, records.read_jsonl(os.path.join(job["out"],
                                                                      "results.jsonl")))
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
        job_records.append({**job, **{k: summary[k] for k in ("runs_done", "runs_expected",
                                "wall_seconds", "timed_runs", "train_seconds")}})
    if not any(row["summary"]["runs_done"] for row in table_rows):
        raise StudyError(f"No fine-tuning result yet for study {config['study']!r}: run "
                         f"python -m experiments.run finetune {' '.join(config['_flag'])}")
    floor = floors.majority_class(config)
    header = page_header(config, command) + [prose(
        "finetune", "csv_grid" if config.get("selection_seed") is None else "csv_selection",
        seed=config.get("selection_seed"))]
    return write_pages(
        config["results_dir"], config["study"], csv=("glue.csv", (
            "pretrain_study", "variant", "step", "task", "score", "best_learning_rate", "seeds",
            "seed_min", "seed_max", "complete", "medians_by_learning_rate"), csv_rows, header),
        table=("table.md", _finetune_table(config, table_rows, command, floor)),
        config=("config.json", {
            "command": command, "study_config": study_config.resolved(config),
            "jobs": job_records, "majority_class": floor}))


def _encoder(job):
    """The table's name of a job's encoder; step 0 is the run's random initialization."""
    name = (f"{job['pretrain_study']}/{job['variant']}" if job["pretrain_study"]
            else job["variant"])
    return f"{name}, random init" if job["step"] == 0 else name


def _finetune_table(config, table_rows, command, floor):
    from keras_tupe.metrics import glue_score_metric

    tasks, edges = config["tasks"], config.get("edge_learning_rates", [])
    rates = list(config["learning_rates"]) + list(edges)
    # The best rate at the grid's edge, which then does not bracket it.
    edge_mark = {min(rates): "↓", max(rates): "↑"} if len(rates) > 1 else {}
    extra = [(task, metric) for task, metrics in _ceiling_metrics(config).items()
             for metric in metrics]
    names = ([TASK_NAMES.get(t, t) for t in tasks]
             + [f"{TASK_NAMES.get(t, t)} {METRIC_NAMES.get(m, m)}" for t, m in extra])
    rows = []
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
                         + edge_mark.get(task_summary["best_learning_rate"], "")
                         + ("" if task in row["complete"] else "*"))
        for task, metric in extra:
            value = summary["tasks"].get(task, {}).get("metrics", {}).get(metric)
            cells.append("–" if value is None else f"{value:.2f}"
                         + ("" if task in row["complete"] else "*"))
        rows.append([_encoder(job), str(job["step"]), *cells,
                     "–" if average is None else f"**{average:.2f}**",
                     f"{done}/{summary['runs_expected']}", records.format_seconds(wall)
                     + ("" if wall is None or timed >= done else f" ({timed} of {done} runs)")])
    if not is_squad(config):
        values = [floor[t] for t in tasks] + [floors.majority_class(config, task, metric)
                                              for task, metric in extra]
        rows.append(["*majority class*", "–",
                     *("(0)" if value is None else f"{value:.2f}" for value in values),
                     f"{sum(floor[t] or 0.0 for t in tasks) / len(tasks):.2f}", "–", "–"])
    if config.get("ceiling"):
        scores = config["ceiling"]["scores"]  # a score, or {metric: value}
        cells = [scores.get(t) if not isinstance(scores.get(t), dict) else scores[t].get(
            glue_score_metric(t)) for t in tasks] + [
            scores[t].get(m) if isinstance(scores.get(t), dict) else None for t, m in extra]
        rows.append(["*ceiling*", "–", *("–" if c is None else f"{c:.1f}" for c in cells),
                     "–" if None in cells[:len(tasks)] else
                     f"{sum(cells[:len(tasks)]) / len(tasks):.2f}", "–", "–"])
    settings = f"settings {json.dumps(config['settings'])}" + (
        f", by task {json.dumps(config['task_settings'])}" if config.get("task_settings") else "")
    seed_rows = [[_encoder(row["job"]), str(row["job"]["step"]), *(
        "–" if t not in row["summary"]["tasks"] else "{seed_min:.1f}–{seed_max:.1f}".format(
            **row["summary"]["tasks"][t]) + ("" if t in row["complete"] else "*") for t in tasks)]
        for row in table_rows if row["summary"]["runs_done"]]
    return prose(
        "finetune", "table", command=command, description=paragraph(config.get("description")),
        title=prose("finetune", "squad" if is_squad(config) else "glue", study=config["study"],
                    squad_file=config.get("squad_file")),
        protocol=prose(
            "finetune", "grid" if config.get("selection_seed") is None else "selection",
            rates=config["learning_rates"], seeds=config["seeds"], count=len(config["seeds"]),
            selection_seed=config.get("selection_seed"), settings=settings,
            edges=prose("finetune", "edges", edges=edges) if edges else "",
            metrics=prose("finetune", "metrics")),
        seeds=len(config["seeds"]),
        table=markdown_table(["encoder", "step", *names, "average", "runs", "time"],
                             "lr" + "r" * len(names) + "rrr", rows),
        seed_table=markdown_table(["encoder", "step", *(TASK_NAMES.get(t, t) for t in tasks)],
                                  "lr" + "r" * len(tasks), seed_rows),
        spread=paragraph(_seed_spread(config, table_rows)),
        random_init=paragraph(any(row["job"]["step"] == 0 for row in table_rows)
                               and prose("finetune", "random_init")),
        majority=paragraph(not is_squad(config) and prose("finetune", "majority")),
        ceiling=paragraph(config.get("ceiling") and prose(
            "finetune", "ceiling", name=config["ceiling"]["name"]))) + "\n"


def _seed_spread(config, table_rows):
    """The scores of a variant fine-tuned from several pre-training seeds (a study and its
    replicates), and the gaps between variants against that spread ("" if none)."""
    seeds = {p["study"]: p["settings"]["seed"]
             for p in study_config.related_configs(config, "pretrain_configs")}
    groups = {}  # (variant, step) -> {pre-training seed: its scores and their average}
    for row in table_rows:
        job = row["job"]
        if row["average"] is not None:  # every task complete
            groups.setdefault((job["variant"], job["step"]), {})[
                seeds[job["pretrain_study"]]] = [*row["scores"], row["average"]]
    groups = {key: by_seed for key, by_seed in groups.items() if len(by_seed) > 1}
    if not groups:
        return ""
    names = [TASK_NAMES.get(t, t) for t in config["tasks"]] + ["average"]
    rows = []
    for (variant, step), by_seed in groups.items():
        columns = list(zip(*(by_seed[seed] for seed in sorted(by_seed))))
        rows.append([_encoder({"pretrain_study": None, "variant": variant, "step": step}),
                     str(step), ", ".join(str(seed) for seed in sorted(by_seed)),
                     *(f"{min(c):.2f}–{max(c):.2f} ({np.mean(c):.2f})" for c in columns)])
    gaps = []
    for a, b in [(a, b) for a in groups for b in groups
                 if a < b and a[1] == b[1] and set(groups[a]) == set(groups[b])]:
        cells = []
        for column in range(len(names)):
            by_seed = [(groups[a][s][column], groups[b][s][column]) for s in sorted(groups[a])]
            diffs = [x - y for x, y in by_seed]
            spread = max(max(v) - min(v) for v in zip(*by_seed))
            cells.append(f"{np.mean(diffs):+.2f}"
                         + (" !" if records.beyond_seed_spread(diffs, spread) else ""))
        gaps.append([f"{a[0]} − {b[0]}", str(a[1]), *cells])
    return prose(
        "finetune", "spread",
        table=markdown_table(["variant", "step", "pre-training seeds", *names],
                             "lrl" + "r" * len(names), rows),
        gaps=paragraph(gaps and prose("finetune", "spread_gaps", table=markdown_table(
            ["pair", "step", *names], "lr" + "r" * len(names), gaps))))

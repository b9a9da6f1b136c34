"""The summary of a GLUE protocol run: the papers' score per task, as Markdown and CSV.

`summarize` takes the median over seeds per (task, learning rate) and keeps each
task's best learning rate; `write_tables` writes that table, with the average, to
`summary.md` and `summary.csv`. `read_results` and `append_result` keep a protocol's
`results.jsonl`, one finished run a line (GLUE's and SQuAD's alike).
"""

import json
import os
import statistics

import numpy as np


def read_results(out_dir):
    """`(path of out_dir/results.jsonl, its rows)`; no rows when it does not exist yet."""
    path = os.path.join(out_dir, "results.jsonl")
    if not os.path.exists(path):
        return path, []
    with open(path) as f:
        return path, [json.loads(line) for line in f if line.strip()]


def append_result(path, row):
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def summarize(rows, tasks):
    """Median over seeds per (task, learning rate); the best learning rate per task.

    Each task is one row however often `tasks` names it, and each (task, learning rate,
    seed) one score however often `rows` holds it (the last: a results.jsonl written
    twice for one run counts once).
    """
    table = []
    runs = {(row["task"], row["learning_rate"], row.get("seed")): row for row in rows}
    for task in dict.fromkeys(tasks):
        by_rate = {}
        for (name, rate, _), row in runs.items():
            if name == task:
                by_rate.setdefault(rate, []).append(_main_score(row))
        if not by_rate:
            continue
        medians = {rate: statistics.median(scores) for rate, scores in by_rate.items()}
        best = max(medians, key=medians.get)
        table.append({
            "task": task,
            "score": 100 * medians[best],
            "best_learning_rate": best,
            "seeds": len(by_rate[best]),
            "seed_min": 100 * min(by_rate[best]),
            "seed_max": 100 * max(by_rate[best]),
            "medians_by_learning_rate": {str(r): 100 * m for r, m in sorted(medians.items())},
        })
    return table


def _main_score(row):
    scores = [split["score"] for split in row["dev"].values()]
    return float(np.mean(scores))  # MNLI: the mean of matched and mismatched


def write_tables(table, out_dir, title):
    """`summary.md` and `summary.csv`, one row per task and the average."""
    average = float(np.mean([row["score"] for row in table])) if table else float("nan")
    lines = [f"# {title}", "", "| task | score | best LR | seeds | seed range |",
             "| --- | ---: | ---: | ---: | --- |"]
    for row in table:
        lines.append(f"| {row['task']} | {row['score']:.2f} | {row['best_learning_rate']:g} | "
                     f"{row['seeds']} | {row['seed_min']:.2f} – {row['seed_max']:.2f} |")
    lines.append(f"| **average** | **{average:.2f}** | | | |")
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out_dir, "summary.csv"), "w") as f:
        f.write("task,score,best_learning_rate,seeds,seed_min,seed_max\n")
        for row in table:
            f.write(f"{row['task']},{row['score']:.4f},{row['best_learning_rate']},{row['seeds']},"
                    f"{row['seed_min']:.4f},{row['seed_max']:.4f}\n")
        f.write(f"average,{average:.4f},,,,\n")
    return average


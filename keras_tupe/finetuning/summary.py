"""A fine-tuning protocol's rows and table: `results.jsonl` (`read_results`,
`append_result`, one finished run a line, GLUE's and SQuAD's alike), the medians over
seeds (`summarize`) and `summary.md` / `summary.csv` (`write_tables`). The plan and the
choice of rate are `keras_tupe.finetuning.protocol.Protocol`'s.
"""

import os
import statistics

import numpy as np

from keras_tupe_base.jsonl import append_jsonl, read_jsonl
from keras_tupe_base.staging import write_text


def read_results(out_dir):
    """`(path of out_dir/results.jsonl, its rows)`; no rows when it does not exist yet. A
    line cut short (a full disk) is skipped with a warning: its run is done again."""
    path = os.path.join(out_dir, "results.jsonl")
    return path, read_jsonl(path)


def append_result(path, row):
    """Appends one finished run's `row` to `path` as a whole line (`append_jsonl`)."""
    append_jsonl(path, row)


def summarize(rows, tasks, chosen=None):
    """Median over seeds per (task, learning rate); the best learning rate per task.

    The best rate is the one with the highest median, or the one `chosen` (`{task: rate
    or None}`, a protocol's choice: `Protocol.summarize`) names. Each task is one row
    however often `tasks` names it, and each (task, learning rate, seed) one score
    however often `rows` holds it (the last: a results.jsonl written twice for one run
    counts once).
    """
    table = []
    runs = {(row["task"], row["learning_rate"], row.get("seed")): row for row in rows}
    for task in dict.fromkeys(tasks):
        by_rate = {}
        for (name, rate, _), row in runs.items():
            if name == task:
                by_rate.setdefault(rate, []).append(main_score(row))
        if not by_rate:
            continue
        medians = {rate: statistics.median(scores) for rate, scores in by_rate.items()}
        best = (chosen or {}).get(task) or max(medians, key=medians.get)
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


def main_score(row):
    """A finished run's score: its dev split's, or the mean of MNLI's two."""
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
    write_text(os.path.join(out_dir, "summary.md"), "\n".join(lines) + "\n")
    csv = (["task,score,best_learning_rate,seeds,seed_min,seed_max"]
           + [f"{row['task']},{row['score']:.4f},{row['best_learning_rate']},{row['seeds']},"
              f"{row['seed_min']:.4f},{row['seed_max']:.4f}" for row in table]
           + [f"average,{average:.4f},,,,"])
    write_text(os.path.join(out_dir, "summary.csv"), "\n".join(csv) + "\n")
    return average

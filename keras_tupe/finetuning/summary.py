"""A fine-tuning protocol's rows and table: `results.jsonl` (`read_results`,
`append_result`, one finished run a line, GLUE's and SQuAD's alike), the plan
(`runs_to_do`), the choice of rate (`chosen_learning_rate`), the medians over seeds
(`summarize`) and `summary.md` / `summary.csv` (`write_tables`).
"""

import os
import statistics

import numpy as np

from keras_tupe.jsonl import append_jsonl, read_jsonl
from keras_tupe.staging import write_text


def read_results(out_dir):
    """`(path of out_dir/results.jsonl, its rows)`; no rows when it does not exist yet. A
    line cut short (a full disk) is skipped with a warning: its run is done again."""
    path = os.path.join(out_dir, "results.jsonl")
    return path, read_jsonl(path)


def append_result(path, row):
    """Appends one finished run's `row` to `path` as a whole line (`append_jsonl`)."""
    append_jsonl(path, row)


def check_selection(seeds, selection_seed, edge_learning_rates, learning_rates):
    """Raises ValueError for a `selection_seed` not among `seeds`, or edge rates without
    one, not positive or already in `learning_rates`."""
    if selection_seed is None:
        if edge_learning_rates:
            raise ValueError("edge_learning_rates widen the grid of a selection_seed; "
                             "without one every rate runs every seed (put them in "
                             "learning_rates).")
        return
    if selection_seed not in seeds:
        raise ValueError(f"selection_seed {selection_seed!r} is not one of the seeds "
                         f"{list(seeds)}: the chosen rate's score is the median over all of them.")
    bad = [rate for rate in edge_learning_rates
           if not isinstance(rate, (int, float)) or rate <= 0 or rate in learning_rates]
    if bad:
        raise ValueError(f"edge_learning_rates {bad}: each must be a positive rate that is not "
                         f"already in learning_rates {list(learning_rates)}.")


def runs_to_do(rows, task, learning_rates, seeds, selection_seed=None,
               edge_learning_rates=()):
    """The `(learning rate, seed)` runs of `task` the protocol still needs after `rows`,
    in order; `[]` when its table is final.

    Without `selection_seed`: every rate x every seed not in `rows`. With it (one of
    `seeds`): first every rate of `learning_rates` with that seed; then, while the rate
    it scores best at is the lowest (highest) one run and `edge_learning_rates` has a
    lower (higher) one, the nearest such rate with that seed, one at a time; then the
    other seeds at the chosen rate (`chosen_learning_rate`).
    """
    done = {(row["learning_rate"], row.get("seed")) for row in rows if row["task"] == task}
    if selection_seed is None:
        return [(rate, seed) for rate in learning_rates for seed in seeds
                if (rate, seed) not in done]
    check_selection(seeds, selection_seed, edge_learning_rates, learning_rates)
    first = [(rate, selection_seed) for rate in learning_rates
             if (rate, selection_seed) not in done]
    if first:
        return first
    best, tried = _selection(rows, task, learning_rates, selection_seed, edge_learning_rates)
    ladder = sorted(set(learning_rates) | set(edge_learning_rates))
    lower = [rate for rate in ladder if rate < best and rate not in tried]
    higher = [rate for rate in ladder if rate > best and rate not in tried]
    if best == min(tried) and lower:
        return [(lower[-1], selection_seed)]
    if best == max(tried) and higher:
        return [(higher[0], selection_seed)]
    return [(best, seed) for seed in seeds if (best, seed) not in done]


def chosen_learning_rate(rows, task, learning_rates, selection_seed, edge_learning_rates=()):
    """The rate with the best score of `selection_seed` among the rates of the protocol
    run with it (the lowest of equal ones); None before any has run."""
    best, _ = _selection(rows, task, learning_rates, selection_seed, edge_learning_rates)
    return best


def _selection(rows, task, learning_rates, selection_seed, edge_learning_rates):
    ladder = set(learning_rates) | set(edge_learning_rates)
    scores = {row["learning_rate"]: _main_score(row) for row in rows
              if row["task"] == task and row.get("seed") == selection_seed
              and row["learning_rate"] in ladder}
    if not scores:
        return None, set()
    return max(sorted(scores), key=scores.get), set(scores)


def summarize(rows, tasks, selection_seed=None, edge_learning_rates=()):
    """Median over seeds per (task, learning rate); the best learning rate per task.

    The best rate is the one with the highest median, or, with `selection_seed`, the
    one that seed scores best at (`chosen_learning_rate`: the rate the other seeds ran
    at). Each task is one row however often `tasks` names it, and each (task, learning
    rate, seed) one score however often `rows` holds it (the last: a results.jsonl
    written twice for one run counts once).
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
        if selection_seed is not None:
            best = chosen_learning_rate(list(runs.values()), task, list(by_rate),
                                        selection_seed, edge_learning_rates) or best
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
    write_text(os.path.join(out_dir, "summary.md"), "\n".join(lines) + "\n")
    csv = (["task,score,best_learning_rate,seeds,seed_min,seed_max"]
           + [f"{row['task']},{row['score']:.4f},{row['best_learning_rate']},{row['seeds']},"
              f"{row['seed_min']:.4f},{row['seed_max']:.4f}" for row in table]
           + [f"average,{average:.4f},,,,"])
    write_text(os.path.join(out_dir, "summary.csv"), "\n".join(csv) + "\n")
    return average

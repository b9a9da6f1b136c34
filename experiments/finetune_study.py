"""The fine-tuning study (TUPE Table 2 at small scale): GLUE on pre-trained checkpoints.

For every variant of the named pre-training studies and every checkpoint
fraction of the config (e.g. 0.5 and 1.0 of the budget), `run_study` runs
`keras_tupe.finetuning.run_protocol` with the config's reduced grid (the same
learning rates, seeds, epochs and data for every encoder), in
`<runs_dir>/<study>/<pretrain study>/<variant>/step_NNNNNNN/`. The protocol
appends each finished (task, learning rate, seed) to `results.jsonl` there, so a
stopped study continues where it was; `finetune_settings.json` pins the
settings, so a changed config cannot mix its results with older ones. The grid is
not pinned: each row names its learning rate and seed and the report reads only
the config's grid, so a moved or widened grid reuses the runs it shares.

`report` (also run at the end of `run_study`) writes `<study>_glue.csv`,
`<study>_table.md` (median over seeds at the best learning rate per task, and the
average, as the papers report, with each task's majority-class score: the floor an
encoder must clear), `<study>_config.json` and `<study>_runs.csv`: every fine-tuning
run's full result row, the record that `runs/` (not in git) is not. A job whose
`results.jsonl` is gone (a new workspace) is reported from that record, and a job whose
whole grid is recorded is not fine-tuned again; a row on disk wins over a recorded one.
"""

import hashlib
import json
import os

import numpy as np

from experiments import config as study_config
from experiments import records
from experiments.config import StudyError
from experiments.replicates import beyond_seed_spread

TASK_NAMES = {"squad": "SQuAD F1 (EM)",
              "cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "rte": "RTE",
              "qnli": "QNLI", "mnli": "MNLI", "qqp": "QQP", "wnli": "WNLI"}
SETTINGS_FILE = "finetune_settings.json"
RUNS_COLUMNS = ("pretrain_study", "variant", "step", "task", "learning_rate", "seed", "score",
                "wall_seconds", "result")


def _job_key(job):
    return (job["pretrain_study"], job["variant"], int(job["step"]))


def recorded_rows(config):
    """`{(pretrain study, variant, step): [result row, ...]}` from `<study>_runs.csv`."""
    path = os.path.join(config["results_dir"], f"{config['study']}_runs.csv")
    if not os.path.exists(path):
        return {}
    result = {}
    for line in records.read_csv_rows(path):
        key = (line["pretrain_study"], line["variant"], int(line["step"]))
        result.setdefault(key, []).append(json.loads(line["result"]))
    return result


def job_rows(job, recorded):
    """`(rows, how many came from the record)`: `results.jsonl` on disk, completed by the
    committed record for the (task, learning rate, seed) it lacks."""
    on_disk = records.read_jsonl(os.path.join(job["out"], "results.jsonl"))
    seen = {(r["task"], r["learning_rate"], r["seed"]) for r in on_disk}
    kept = [r for r in recorded.get(_job_key(job), [])
            if (r["task"], r["learning_rate"], r["seed"]) not in seen]
    return on_disk + kept, len(kept)


def _grid_recorded(config, job, recorded):
    rows = recorded.get(_job_key(job), [])
    done = {(r["task"], r["learning_rate"], r["seed"]) for r in rows}
    return all((t, lr, seed) in done for t in config["tasks"] for lr in config["learning_rates"]
               for seed in config["seeds"])


def plan(config, only_variants=None, only_checkpoints=None):
    """Every (pre-trained checkpoint, output directory) the study fine-tunes."""
    jobs = []
    wanted = config.get("variants")
    pretrains = study_config.related_configs(config, "pretrain_configs")
    _check_chosen_variants(config, pretrains)
    for pretrain in pretrains:
        for variant in study_config.variants(pretrain):
            if wanted and variant.name not in wanted:
                continue
            if only_variants and variant.name not in only_variants:
                continue
            for fraction in config["checkpoints"]:
                if only_checkpoints and fraction not in only_checkpoints:
                    continue
                chosen = study_config.checkpoint_variants(config, fraction)
                if chosen is not None and variant.name not in chosen and (
                        f"{pretrain['study']}/{variant.name}" not in chosen):
                    continue
                step, init = study_config.checkpoint_path(pretrain, variant, fraction)
                jobs.append({
                    "pretrain_study": pretrain["study"], "variant": variant.name,
                    "preset": variant.preset, "fraction": fraction, "step": step, "init": init,
                    "vocab": os.path.join(variant.run_dir, "vocab.txt"),
                    "lowercase": pretrain["vocabulary"]["lowercase"],
                    "out": os.path.join(study_config.study_dir(config), pretrain["study"],
                                        variant.name, f"step_{step:07d}"),
                })
    if not jobs:
        raise StudyError(f"{config['_path']}: nothing to fine-tune with these filters.")
    return jobs


def _check_chosen_variants(config, pretrains):
    """Every name in `checkpoint_variants` is a fine-tuned variant (of the study it names)."""
    wanted = config.get("variants")
    known = {(p["study"], v.name) for p in pretrains for v in study_config.variants(p)
             if not wanted or v.name in wanted}
    for key, names in config.get("checkpoint_variants", {}).items():
        for name in names:
            study, _, variant = name.rpartition("/")
            found = (study, variant) in known if study else any(v == variant for _, v in known)
            if not found:
                choices = sorted({v for _, v in known} | {f"{s}/{v}" for s, v in known})
                raise StudyError(f"{config['_path']}: `checkpoint_variants` {key}: no variant "
                                 f"{name!r} among the fine-tuned ones. Valid: {choices}")


def _settings(config, job):
    pinned = {"init": job["init"], "vocab": job["vocab"], "lowercase": job["lowercase"],
              "data_dir": config.get("data_dir"), "settings": config["settings"]}
    for key in ("task_settings", "squad_file"):  # absent: older records still match
        if config.get(key):
            pinned[key] = config[key]
    return pinned


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run_study(config, command, report_command, only_variants=None, only_checkpoints=None,
              fresh=False):
    """Fine-tunes every planned checkpoint (resumable); then writes the report, which names
    `report_command` as the command that regenerates it. `fresh`: a checkpoint whose grid
    the committed record holds is fine-tuned too (its runs on disk replace the record)."""
    import keras

    from keras_tupe.finetuning import run_protocol, run_squad_protocol

    jobs = plan(config, only_variants, only_checkpoints)
    recorded = {} if fresh else recorded_rows(config)
    for job in [job for job in jobs if not os.path.exists(job["out"])
                and _grid_recorded(config, job, recorded)]:
        print(f"[{config['study']}] {job['pretrain_study']}/{job['variant']} step {job['step']}: "
              f"every run is in {config['study']}_runs.csv (an earlier workspace), skipped",
              flush=True)
        jobs.remove(job)
    missing = [job["init"] for job in jobs if not os.path.exists(job["init"])]
    if missing:
        raise StudyError("Not pre-trained yet (run the pre-training studies first):\n  "
                         + "\n  ".join(missing))
    for job in jobs:
        settings = _settings(config, job)
        settings_path = os.path.join(job["out"], SETTINGS_FILE)
        if os.path.exists(settings_path):
            with open(settings_path) as f:
                recorded = json.load(f)
            if {k: recorded.get(k) for k in settings} != settings:
                raise StudyError(
                    f"{job['out']} holds results fine-tuned with other settings ({settings_path}: "
                    f"{ {k: recorded.get(k) for k in settings} }, now {settings}). Move it away "
                    "or restore the config.")
        else:
            records.write_json(settings_path, {**settings, "init_sha256": _sha256(job["init"]),
                                               "command": command, "created": records.now()})
        print(f"[{config['study']}] {job['pretrain_study']}/{job['variant']} step {job['step']}: "
              f"{config['tasks']} x lr {config['learning_rates']} x seeds {config['seeds']}",
              flush=True)
        keras.backend.clear_session()
        if is_squad(config):
            run_squad_protocol(job["init"], job["out"], config["learning_rates"],
                               config["seeds"], vocab=job["vocab"], lowercase=job["lowercase"],
                               offline_split=config["squad_file"], **config["settings"])
            continue
        run_protocol(config["tasks"], job["init"], job["out"],
                     learning_rates=config["learning_rates"], seeds=config["seeds"],
                     vocab=job["vocab"], lowercase=job["lowercase"],
                     data_dir=config.get("data_dir"),
                     task_settings=config.get("task_settings"), **config["settings"])
    return report(config, report_command)


def is_squad(config):
    """A SQuAD study: `tasks` is `["squad"]`, fine-tuned on an article split of `squad_file`."""
    return config["tasks"] == ["squad"]


def majority_class(config):
    """The best dev score (x100) of one constant answer, per task: the floor that a
    classifier ignoring its input can reach (accuracy: the dev majority label's share;
    Matthews correlation: 0).

    STS-B, a regression, gets None: a constant has no correlation.
    """
    from keras_tupe.data import glue
    from keras_tupe.metrics import glue_metrics, glue_score

    scores = {}
    for task in config["tasks"]:
        if task == "squad":  # span extraction: no constant answer
            scores[task] = None
            continue
        spec = glue.get_task(task)
        if spec.num_classes == 1:
            scores[task] = None
            continue
        devs = [glue.load_glue(task, split, config.get("data_dir")) for split in spec.eval_splits]
        scores[task] = 100 * max(
            float(np.mean([glue_score(task, glue_metrics(task, np.full(len(dev), label),
                                                         dev.labels)) for dev in devs]))
            for label in range(spec.num_classes))  # MNLI: the mean over its two dev splits
    return scores


def report(config, command):
    """Collects every job's `results.jsonl` into the study's table, CSV and record."""
    from keras_tupe.finetuning import summarize

    jobs = plan(config)
    tasks = config["tasks"]
    rates, seeds = config["learning_rates"], config["seeds"]
    csv_rows, table_rows, job_records, run_rows = [], [], [], []
    expected_runs = len(tasks) * len(rates) * len(seeds)
    recorded = recorded_rows(config)
    for job in jobs:
        every_row, from_record = job_rows(job, recorded)
        run_rows += [{**{k: job[k] for k in ("pretrain_study", "variant", "step")},
                      **{k: r.get(k) for k in ("task", "learning_rate", "seed", "wall_seconds")},
                      "score": 100 * _score(r), "result": json.dumps(r, sort_keys=True)}
                     for r in every_row]
        rows = [r for r in every_row
                if r["learning_rate"] in rates and r["seed"] in seeds and r["task"] in tasks]
        summary = {row["task"]: row for row in summarize(rows, tasks)}
        wall, timed = _wall_time(rows)
        # Complete: every (learning rate, seed) of the grid has run; until then the best
        # learning rate, and so the score, may still change.
        complete = {t for t in tasks
                    if len({(r["learning_rate"], r["seed"]) for r in rows if r["task"] == t})
                    == len(rates) * len(seeds)}
        for task in tasks:
            if task in summary:
                csv_rows.append({**{k: job[k] for k in ("pretrain_study", "variant", "step")},
                                 **summary[task], "complete": task in complete,
                                 "medians_by_learning_rate": json.dumps(
                                     summary[task]["medians_by_learning_rate"])})
        scores = [summary[t]["score"] if t in summary else None for t in tasks]
        average = (sum(scores) / len(scores)) if len(complete) == len(tasks) else None
        ranges = [(summary[t]["seed_min"], summary[t]["seed_max"]) if t in summary else None
                  for t in tasks]
        edges = [_grid_edge(rates, summary[t]["best_learning_rate"]) if t in summary else ""
                 for t in tasks]
        extras = [_exact_match(rows, summary[t]) if t == "squad" and t in summary else ""
                  for t in tasks]
        table_rows.append({"job": job, "scores": scores, "average": average, "done": len(rows),
                           "from_record": from_record, "edges": edges, "extras": extras,
                           "wall": wall, "timed": timed, "complete": complete, "ranges": ranges})
        job_records.append({**job, "runs_done": len(rows), "runs_expected": expected_runs,
                            "runs_from_record": from_record,
                            "wall_seconds": wall, "timed_runs": timed,
                            "train_seconds": sum(r.get("train_seconds", 0) for r in rows)})
    if not any(row["done"] for row in table_rows):
        raise StudyError(f"No fine-tuning result yet for study {config['study']!r}: run "
                         f"python -m experiments.run finetune --config {config['_path']}")
    out_dir, study = config["results_dir"], config["study"]
    header = [f"command: {command}", f"generated: {records.now()}",
              f"study config: {config['_path']}",
              ("score: median over seeds at the best learning rate of the task (x100); "
              "Matthews (CoLA), Pearson (STS-B), accuracy (others)")]
    paths = {"csv": records.write_csv(
        os.path.join(out_dir, f"{study}_glue.csv"),
        ("pretrain_study", "variant", "step", "task", "score", "best_learning_rate", "seeds",
         "seed_min", "seed_max", "complete", "medians_by_learning_rate"), csv_rows, header)}
    paths["runs"] = records.write_csv(
        os.path.join(out_dir, f"{study}_runs.csv"), RUNS_COLUMNS, run_rows,
        header + ["every fine-tuning run, one row each: score (x100) as above; result: the "
                  "run's full record (results.jsonl), from which this table regenerates"])
    floor = majority_class(config)
    paths["table"] = records.write_text(os.path.join(out_dir, f"{study}_table.md"),
                                        _table(config, table_rows, command, expected_runs, floor))
    paths["config"] = records.write_json(os.path.join(out_dir, f"{study}_config.json"), {
        "command": command, "generated": records.now(), "study_config": config["_sources"],
        "machine": records.machine(), "jobs": job_records, "majority_class": floor})
    return paths


def _score(row):
    return float(np.mean([split["score"] for split in row["dev"].values()]))


def _wall_time(rows):
    """`(seconds, runs timed)` of the runs in the table; `(None, 0)` when none is timed.

    Each run records its own `wall_seconds` in `results.jsonl`; runs fine-tuned before it
    did have none and are left out of the sum (the table then says how many runs it covers).
    (Earlier versions timed whole commands in `timing.jsonl`; those commands also ran grid
    points that a later config no longer reports, so that file is not read.)
    """
    timed = [r["wall_seconds"] for r in rows if "wall_seconds" in r]
    return (sum(timed), len(timed)) if timed else (None, 0)


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
    tasks = config["tasks"]
    names = [TASK_NAMES.get(t, t) for t in tasks] + ["average"]

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
                beyond = beyond_seed_spread(diffs, spread)
                cells.append(f"{np.mean(diffs):+.2f}" + (" !" if beyond else ""))
            lines.append(f"| {a[0]} − {b[0]} | {a[1]} | " + " | ".join(cells) + " |")
    return lines


def _exact_match(rows, summary):
    """" (EM x)": SQuAD's median exact match over the seeds at the best-F1 learning rate."""
    exact = [r["dev"]["eval"]["exact_match"] for r in rows
             if r["task"] == "squad" and r["learning_rate"] == summary["best_learning_rate"]]
    return f" ({float(np.median(exact)):.2f})"


def _grid_edge(rates, best):
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


def _table(config, table_rows, command, expected_runs, floor):
    tasks, settings = config["tasks"], config["settings"]
    lines = [
        (f"# Study `{config['study']}`: SQuAD v1.1, an article split of "
         f"`{config['squad_file']}` (Huang Table 2 at small scale; not the official split)"
         if is_squad(config) else
         f"# Study `{config['study']}`: GLUE dev (TUPE Table 2 at small scale)"),
        "",
        f"Regenerate: `{command}`",
        "",
        *([config["description"], ""] if config.get("description") else []),
        (f"Grid, identical for every encoder: learning rates {config['learning_rates']} x seeds "
        f"{config['seeds']}; settings {json.dumps(settings)}"
        + (f", by task {json.dumps(config['task_settings'])}" if config.get("task_settings")
           else "") + ". Score: median over the seeds at the "
        "task's best learning rate (x100); Matthews corr. (CoLA), Pearson (STS-B), accuracy "
        "(others); SQuAD: F1, the learning rate chosen by F1, and in parentheses the median "
        "exact match at that rate. `*`: not all runs of the task are done yet. ↑ / ↓: the best "
        "learning rate is the highest / lowest of the grid, which then does not bracket it "
        "(widen the grid)."),
        "",
        "| encoder | step | " + " | ".join(TASK_NAMES.get(t, t) for t in tasks)
        + " | average | runs | time |",
        "| --- | ---: | " + " | ".join("---:" for _ in tasks) + " | ---: | ---: | ---: |",
    ]
    for row in table_rows:
        job, average, done, wall, timed = (row[k] for k in ("job", "average", "done", "wall",
                                                             "timed"))
        cells = ["–" if s is None else f"{s:.2f}" + extra + edge
                 + ("" if t in row["complete"] else "*")
                 for t, s, edge, extra in zip(tasks, row["scores"], row["edges"], row["extras"])]
        lines.append(
            f"| {_encoder(job)} | {job['step']} | " + " | ".join(cells)
            + f" | {'–' if average is None else f'**{average:.2f}**'} | {done}/{expected_runs}"
            + (" †" if row["from_record"] else "") + " | "
            f"{records.format_seconds(wall)}"
            + ("" if wall is None or timed >= done else f" ({timed} of {done} runs)") + " |")
    if not is_squad(config):
        floor_scores = [floor[t] or 0.0 for t in tasks]
        lines.append("| *majority class* | – | " + " | ".join(
            "(0)" if floor[t] is None else f"{floor[t]:.2f}" for t in tasks)
            + f" | {sum(floor_scores) / len(tasks):.2f} | – | – |")
    lines += ["", (f"Seed range: the lowest and highest of the {len(config['seeds'])} seeds at "
                  "the learning rate the table reports."), "",
              "| encoder | step | " + " | ".join(TASK_NAMES.get(t, t) for t in tasks) + " |",
              "| --- | ---: | " + " | ".join("---:" for _ in tasks) + " |"]
    for row in table_rows:
        if row["done"]:
            job = row["job"]
            lines.append(
                f"| {_encoder(job)} | {job['step']} | " + " | ".join(
                    "–" if r is None else f"{r[0]:.1f}–{r[1]:.1f}"
                    + ("" if t in row["complete"] else "*") for t, r in zip(tasks, row["ranges"]))
                + " |")
    lines += _seed_spread(config, table_rows)
    lines += ["", ("Time: wall time of the checkpoint's fine-tuning runs in the table (data, "
                  "training and evaluation), summed. Runs fine-tuned before runs recorded their "
                  "own time are not in it; the time then says how many of the runs it covers."),
              "", (f"†: some or all of the runs are from `{config['study']}_runs.csv`, the record "
                   "an earlier workspace committed (its `runs/` folder is gone)."),
              *(["", ("*Random init* (step 0): the encoder the pre-training run started "
                      "from, fine-tuned with the same grid: the control that shows what "
                      "pre-training adds.")]
                if any(row["job"]["step"] == 0 for row in table_rows) else []),
              *([] if is_squad(config) else [
                  "", ("*Majority class*: the dev score of always giving the dev set's most "
                       "frequent label, the most a classifier that ignores its input can score. "
                       "For a regression (STS-B) a constant has no correlation; it counts as 0 "
                       "in the average.")]), ""]
    return "\n".join(lines)

"""Pre-training studies: every variant trained identically, then one report.

`run_study` trains the variants of a config one after the other, each in its own
resumable run directory `<runs_dir>/<study>/<variant>` (`keras_tupe.pretraining`:
a killed run started again continues from its last backup and ends with the
same weights). Finished runs are skipped. All runs get the same shared
vocabulary file and the same `PretrainConfig` fields but the preset.

`report` checks that claim on disk, then writes `<study>_loss.csv`,
`<study>_val_loss.png` (TUPE Figure 4a: validation loss against steps),
`<study>_table.md` (validation loss at 25/50/100% of the budget) and
`<study>_config.json` (the study config, the vocabulary hash and every run's
recorded settings) into the results folder.
"""

import json
import os
import zipfile

from experiments import config as study_config
from experiments import records
from experiments.config import StudyError

FRACTIONS = (0.25, 0.5, 1.0)
# Fields of `run_config.json` that may differ between the runs of a study.
FREE_FIELDS = ("preset", "out")


def run_study(config, command, only=None, verbose=2, until_step=None, fresh=False):
    """Trains (or resumes, or skips) every variant; returns `{name: "trained" | "skipped"}`
    (`"trained to step N"` with `until_step`, which stops each run there: see
    `keras_tupe.pretraining.pretrain`). `fresh`: a run the committed report records but
    that is not on disk is trained too."""
    import keras

    from keras_tupe.pretraining import pretrain

    selected = _select(config, only)
    study_config.ensure_vocabulary(config, command=command)
    kept = {} if fresh else recorded_runs(config)[0]
    status = {}
    with study_config.registered_presets(config):
        for variant in selected:
            if variant.is_finished:
                print(f"[{config['study']}] {variant.name}: finished, skipped "
                      f"({variant.run_dir})", flush=True)
                status[variant.name] = "skipped"
                continue
            record = kept.get(variant.name)
            if record and not record["finished"] and not os.path.exists(variant.run_dir):
                print(f"[{config['study']}] {variant.name}: unfinished in an earlier workspace "
                      f"(step {record['rows'][-1]['step']}, {record['source']}); its backup is "
                      "not here, so it starts anew (the report keeps the recorded steps until "
                      "the new run passes them)", flush=True)
            # Finished in an earlier workspace: trained again only when named in `only`.
            elif (record and not (only and variant.name in only)
                    and not os.path.exists(variant.run_dir)):
                print(f"[{config['study']}] {variant.name}: finished in an earlier workspace "
                      f"({record['source']}), skipped; name it in --variants to "
                      "train it again", flush=True)
                status[variant.name] = "skipped (recorded)"
                continue
            print(f"[{config['study']}] {variant.name}: pre-training {variant.preset} -> "
                  f"{variant.run_dir}", flush=True)
            keras.backend.clear_session()
            pretrain(study_config.pretrain_config(config, variant, verbose=verbose),
                     until_step=until_step)
            status[variant.name] = ("trained" if until_step is None
                                    else f"trained to step {until_step}")
    return status


def _select(config, only):
    all_variants = study_config.variants(config)
    if not only:
        return all_variants
    names = [v.name for v in all_variants]
    unknown = sorted(set(only) - set(names))
    if unknown:
        raise StudyError(f"{config['_path']} has no variant(s) {unknown}. Variants: {names}")
    return [v for v in all_variants if v.name in only]


# === Report ===

def _backbone_config(run_dir):
    """The encoder config saved in `backbone.keras` (read from the archive, no model built)."""
    path = os.path.join(run_dir, "backbone.keras")
    if not os.path.exists(path):
        return None
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("config.json"))["config"]


def collect(config):
    """Every run of a study as found on disk, checked against the config.

    Raises `StudyError`, naming the runs and fields, when a run was trained with
    other settings than the config's (or than another run's), another
    vocabulary, or an encoder other than its preset plus the allowed overrides.
    """
    kept, kept_vocabulary = recorded_runs(config)
    vocabulary_record = study_config.read_vocabulary_record(config) or kept_vocabulary
    vocabulary_sha = vocabulary_record["sha256"] if vocabulary_record else None
    runs, problems = [], []
    reference = None
    for variant in study_config.variants(config):
        run = {"variant": variant, "status": "not started", "rows": [], "wall_seconds": None,
               "source": None}
        runs.append(run)
        config_path = os.path.join(variant.run_dir, "run_config.json")
        record = kept.get(variant.name)
        here = None  # the last logged step of an unfinished run on disk
        if os.path.exists(config_path):
            rows, wall_seconds = records.read_metrics(variant.run_dir)
            here = None if variant.is_finished else (rows[-1]["step"] if rows else 0)
            # The run on disk wins, unless it was started anew here and has not yet passed
            # the steps an earlier workspace recorded (the runs are deterministic).
            if here is None or record is None or record["finished"] or (
                    record["rows"][-1]["step"] <= here):
                record = None
                with open(config_path) as f:
                    recorded = json.load(f)
                run.update(rows=rows, wall_seconds=wall_seconds, source=variant.run_dir,
                           status="finished" if here is None else f"unfinished (step {here})")
                backbone = _backbone_config(variant.run_dir)
        if record:
            config_path = record["source"]
            recorded, backbone = record["run_config"], record["backbone_config"]
            status = (RECORDED_STATUS if record["finished"]
                      else f"unfinished (recorded, step {record['rows'][-1]['step']}"
                      + ("" if here is None else f"; started anew here, at step {here}") + ")")
            run.update(rows=record["rows"], wall_seconds=record["wall_seconds"],
                       status=status, source=record["source"])
        elif run["source"] is None:
            continue
        run["run_config"] = recorded
        saved = recorded["config"]
        expected = json.loads(json.dumps(
            study_config.pretrain_config(config, variant).resume_key()))
        for key in sorted(set(saved) | set(expected)):
            if key == "out":
                continue
            if saved.get(key) != expected.get(key):
                problems.append(f"{variant.name}: {key} is {saved.get(key)!r} in "
                                f"{config_path}, the config says {expected.get(key)!r}")
        shared = {k: v for k, v in saved.items() if k not in FREE_FIELDS}
        shared["replicas"] = recorded.get("replicas")
        if reference is None:
            reference = (variant.name, shared)
        else:
            for key in sorted(set(shared) | set(reference[1])):
                if shared.get(key) != reference[1].get(key):
                    problems.append(f"{variant.name} and {reference[0]} differ in {key}: "
                                    f"{shared.get(key)!r} vs {reference[1].get(key)!r}")
        if recorded.get("vocabulary_sha256") != vocabulary_sha:
            problems.append(f"{variant.name}: vocabulary sha256 {recorded.get('vocabulary_sha256')} "
                            f"is not the shared vocabulary's ({vocabulary_sha})")
        run["backbone_config"] = backbone
        if backbone is not None:
            for key, value in study_config.expected_backbone(variant).items():
                if key == "vocabulary_size":
                    continue
                if backbone.get(key) != value:
                    problems.append(f"{variant.name}: its encoder has {key}={backbone.get(key)!r}, "
                                    f"the preset {variant.base_preset} with {variant.overrides} "
                                    f"says {value!r}")
            if backbone.get("dropout") != config["settings"].get("dropout", 0.1):
                problems.append(f"{variant.name}: encoder dropout {backbone.get('dropout')}")
    if problems:
        raise StudyError(
            f"The runs of study {config['study']!r} were not trained identically; refusing to "
            "report them as one study:\n  " + "\n  ".join(problems))
    return runs, vocabulary_record


RECORDED_STATUS = "finished (recorded)"


def is_finished(run_record):
    """Whether a report's run record (`<study>_config.json`, `runs.<variant>`) is of a
    finished run: one made here, or one kept from an earlier workspace's report."""
    return run_record.get("status") in ("finished", RECORDED_STATUS)


def recorded_runs(config):
    """The finished runs of a study as its committed report recorded them.

    `runs/` is not in git, so a new workspace starts without the run
    directories; the report's `<study>_config.json` (each run's recorded
    settings, encoder config and wall time) and `<study>_loss.csv` (every
    logged evaluation) are in git. `collect` takes a run whose directory is
    absent from there, checks it like a run on disk and marks it
    `RECORDED_STATUS`, so a study spread over several workspaces reports all of
    its runs. An unfinished run is kept too (`"finished": False`), for the report
    only: without its backup it is trained anew, and `collect` reports its recorded
    steps until the new run has logged more.

    Returns `({variant name: record}, the vocabulary record of that report)`;
    empty when the study has no committed report.
    """
    out_dir, study = config["results_dir"], config["study"]
    record_path = os.path.join(out_dir, f"{study}_config.json")
    loss_path = os.path.join(out_dir, f"{study}_loss.csv")
    if not (os.path.exists(record_path) and os.path.exists(loss_path)):
        return {}, None
    with open(record_path) as f:
        report_record = json.load(f)
    rows = {}
    for row in records.read_csv_rows(loss_path):
        parsed = {key: records.parse_number(row.get(key)) for key in records.METRIC_COLUMNS}
        parsed["step"] = int(parsed["step"])
        rows.setdefault(row["variant"], []).append(parsed)
    kept = {}
    for name, run in report_record.get("runs", {}).items():
        if not run.get("run_config"):
            continue
        finished = is_finished(run)
        if not finished and not rows.get(name):
            continue  # started, but stopped before its first evaluation
        if not rows.get(name):
            raise StudyError(f"{record_path} records {name} as finished, but {loss_path} has "
                             "no row of it: the two files are from different reports.")
        kept[name] = {"finished": finished, "run_config": run["run_config"],
                      "backbone_config": run.get("backbone_config"),
                      "wall_seconds": run.get("wall_seconds"),
                      "rows": sorted(rows[name], key=lambda r: r["step"]),
                      "source": f"{record_path}, {loss_path}"}
    vocabulary = report_record.get("vocabulary")
    if vocabulary and vocabulary.get("settings") != study_config.vocabulary_settings(
            config["vocabulary"]):
        vocabulary = None  # another vocabulary: its runs then fail the sha256 check
    return kept, vocabulary


def collect_references(config):
    """The runs of other studies named by `references`, as `(study config, run)` pairs.

    Raises `StudyError` when a reference study was trained with other settings
    than this one (the seed aside), another size or vocabulary, or lacks a named
    variant: a curve drawn beside the study's own must be comparable with them.
    """
    folder = os.path.dirname(config["_path"])
    result = []
    for file, names in config.get("references", {}).items():
        other = study_config.load_config(os.path.join(folder, file), kind="pretrain")
        if other["study"] == config["study"]:
            raise StudyError(f"{config['_path']}: `references` names its own study ({file}); "
                             "its runs are in the report already.")
        ours, theirs = config["settings"], other["settings"]
        differing = sorted(k for k in set(ours) | set(theirs)
                           if k != "seed" and ours.get(k) != theirs.get(k))
        differing += [k for k in ("size", "vocabulary") if other[k] != config[k]]
        if differing:
            raise StudyError(
                f"{config['_path']}: the reference study {file} was trained with other "
                f"{differing} than this one; only runs with the same settings (the seed may "
                "differ) can be drawn beside its own.")
        runs = {run["variant"].name: run for run in collect(other)[0]}
        unknown = [name for name in names if name not in runs]
        if unknown:
            raise StudyError(f"{config['_path']}: the reference study {file} has no "
                             f"variant(s) {unknown}. Its variants: {sorted(runs)}")
        result += [(other, runs[name]) for name in names]
    return result


def evaluation_step(config, fraction):
    """The evaluation step nearest to `fraction` of the study's budget (at least the first)."""
    settings = config["settings"]
    every = settings.get("eval_every", 1000)
    return max(every, round(fraction * settings["steps"] / every) * every)


def fraction_steps(config):
    """`{fraction: step}`, in order: the evaluation step nearest to each of `FRACTIONS`
    of the budget, and each saved checkpoint's own fraction where an evaluation falls on
    it (the long runs' 30%, TUPE's claim, is a column of their table)."""
    settings = config["settings"]
    steps, every = settings["steps"], settings.get("eval_every", 1000)
    columns = {f: evaluation_step(config, f) for f in FRACTIONS}
    for step in settings.get("save_steps") or ():
        if 0 < step < steps and step % every == 0 and step not in columns.values():
            columns[step / steps] = step
    return dict(sorted(columns.items()))


def report(config, command):
    """Writes the study's CSV, plot, table and config record; returns their paths."""
    runs, vocabulary_record = collect(config)
    references = collect_references(config)
    started = [run for run in runs if run["rows"]]
    if not started:
        raise StudyError(f"No run of study {config['study']!r} has logged a step yet "
                         f"(looked in {study_config.study_dir(config)}). Pre-train first: "
                         f"python -m experiments.run pretrain --config {config['_path']}")
    out_dir, study = config["results_dir"], config["study"]
    settings = config["settings"]
    tokens_per_step = settings["batch_size"] * settings["seq_len"]
    header = [f"command: {command}", f"generated: {records.now()}",
              f"study config: {config['_path']}"]
    paths = {}

    rows = []
    for run in started:
        variant = run["variant"]
        for row in run["rows"]:
            rows.append({"variant": variant.name, "preset": variant.preset,
                         "tokens": row["step"] * tokens_per_step, **row})
    paths["csv"] = records.write_csv(
        os.path.join(out_dir, f"{study}_loss.csv"),
        ("variant", "preset", "step", "tokens") + records.METRIC_COLUMNS[1:], rows, header)

    paths["png"] = _plot(config, started, os.path.join(out_dir, f"{study}_val_loss.png"),
                         references)
    paths["pairs"] = records.write_csv(
        os.path.join(out_dir, f"{study}_pairs.csv"), PAIR_COLUMNS,
        pair_differences([(run["variant"].name, run) for run in started] + [
            (_reference_label(config, other, run), run) for other, run in references]),
        header + ["diff = val_loss(a) - val_loss(b) at the evaluations both logged; "
                  "a_lower: how many of them a was below b"])
    paths["table"] = records.write_text(os.path.join(out_dir, f"{study}_table.md"),
                                        _table(config, runs, command, vocabulary_record,
                                               references))
    paths["config"] = records.write_json(os.path.join(out_dir, f"{study}_config.json"), {
        "command": command,
        "generated": records.now(),
        "study_config": config["_sources"],
        "vocabulary": vocabulary_record,
        "runs": {
            run["variant"].name: {
                "preset": run["variant"].preset,
                "variant": run["variant"].variant,
                "structural_overrides": run["variant"].overrides,
                "status": run["status"],
                "source": run["source"],
                "wall_seconds": run["wall_seconds"],
                "run_config": run.get("run_config"),
                "backbone_config": run.get("backbone_config"),
            }
            for run in runs
        },
        "references": [
            {"study": other["study"], "config": other["_path"], "variant": run["variant"].name,
             "seed": other["settings"]["seed"], "status": run["status"],
             "run_dir": run["variant"].run_dir}
            for other, run in references
        ],
    })
    return paths


PAIR_COLUMNS = ("a", "b", "evaluations", "a_lower", "diff_min", "diff_max", "final_step",
                "diff_final")


def pair_differences(named_runs):
    """Per pair of runs, how their validation losses differ over the shared evaluations.

    The numbers results.md quotes ("below at all 20 evaluations, by 0.02 to 0.08")
    come from here rather than from subtracting CSV columns by hand.
    """
    curves = [(name, {r["step"]: r["val_loss"] for r in run["rows"] if r["val_loss"] is not None})
              for name, run in named_runs]
    rows = []
    for i, (a, losses_a) in enumerate(curves):
        for b, losses_b in curves[i + 1:]:
            steps = sorted(set(losses_a) & set(losses_b))
            if not steps:
                continue
            diffs = [losses_a[step] - losses_b[step] for step in steps]
            rows.append({"a": a, "b": b, "evaluations": len(steps),
                         "a_lower": sum(d < 0 for d in diffs), "diff_min": min(diffs),
                         "diff_max": max(diffs), "final_step": steps[-1],
                         "diff_final": diffs[-1]})
    return rows


def _reference_label(config, other, run):
    seed = other["settings"]["seed"]
    return (f"{run['variant'].name} ({other['study']}"
            + ("" if seed == config["settings"]["seed"] else f", seed {seed}") + ")")


def _plot(config, runs, path, references=()):
    plt = records.pyplot()
    settings = config["settings"]
    figure, axis = plt.subplots(figsize=(7, 4.5))
    curves = [(run, False, run["variant"].name) for run in runs] + [
        (run, True, _reference_label(config, other, run)) for other, run in references]
    styles = {}  # one colour and marker per variant name: a reference of it shares them
    for run, is_reference, label in curves:
        name = run["variant"].name
        style = dict(styles.setdefault(name, records.line_style(len(styles))))
        if is_reference:
            style.update(linestyle=":")
        points = [(r["step"], r["val_loss"]) for r in run["rows"] if r["val_loss"] is not None]
        if points:
            axis.plot(*zip(*points), ms=2.5, lw=1.0 if is_reference else 1.3, label=label,
                      **style)
    axis.set_xlabel(f"pre-training step (× {settings['batch_size'] * settings['seq_len']:,} tokens)")
    axis.set_ylabel("validation masked-LM loss")
    axis.set_title(f"{config['study']}: {config['size']} encoders, identical data and settings",
                   fontsize=10)
    axis.grid(alpha=0.3)
    records.legend_outside(axis)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(figure)
    return path


def _table(config, runs, command, vocabulary_record, references=()):
    settings = config["settings"]
    steps = settings["steps"]
    tokens = steps * settings["batch_size"] * settings["seq_len"]
    columns = fraction_steps(config)
    lines = [
        f"# Study `{config['study']}`: validation masked-LM loss",
        "",
        (f"Runs: `python -m experiments.run pretrain --config {config['_path']}`; this table, "
        f"the CSV and the plot: `{command}`"),
        "",
        *([config["description"], ""] if config.get("description") else []),
        (f"Every run: `{config['size']}` encoders, {steps:,} steps × {settings['batch_size']} × "
        f"{settings['seq_len']} tokens = {tokens:,} tokens, peak LR "
        f"{settings['learning_rate']:g}, seed {settings['seed']}, the shared vocabulary "
        f"(sha256 `{(vocabulary_record or {}).get('sha256', '?')[:16]}…`); validation on "
        f"{settings.get('valid_batches', 50)} fixed batches every "
        f"{settings.get('eval_every', 1000)} steps. The settings of every run are in "
        f"`{config['study']}_config.json` and were checked identical."),
        "",
        "| variant | preset | " + " | ".join(f"{round(f * 100)}% (step {s})" for f, s in
                                            columns.items())
        + " | val. accuracy (100%) | wall time | tokens/s | status |",
        "| --- | --- | " + " | ".join("---:" for _ in columns) + " | ---: | ---: | ---: | --- |",
    ]
    rows = [(run, run["variant"].name, run["status"]) for run in runs] + [
        (run, f"*{_reference_label(config, other, run)}*", f"reference: {run['status']}")
        for other, run in references]
    for run, name, status in rows:
        variant = run["variant"]
        by_step = {r["step"]: r for r in run["rows"]}
        losses = [by_step.get(step, {}).get("val_loss") for step in columns.values()]
        final = by_step.get(columns[1.0], {}).get("val_accuracy")
        speed = records.median_tokens_per_second(run["rows"])
        preset = variant.preset + (f" ({', '.join(f'{k}={v}' for k, v in variant.overrides.items())})"
                                   if variant.overrides else "")
        lines.append(
            f"| {name} | {preset} | "
            + " | ".join("–" if v is None else f"{v:.3f}" for v in losses)
            + f" | {'–' if final is None else f'{final:.3f}'} | "
            f"{records.format_seconds(run['wall_seconds']) if run['rows'] else '–'} | "
            f"{'–' if speed is None else f'{speed:,.0f}'} | {status} |")
    machines = sorted({run["run_config"]["versions"]["machine"] for run, _, _ in rows
                       if run.get("run_config")})
    lines += ["", "Wall time: training and validation, summed over the processes that ran the "
                  "run (start-up and the shared vocabulary not included). Machine: "
              + "; ".join(machines) + "."]
    if any(run["status"].startswith("unfinished (recorded") for run, _, _ in rows):
        lines += ["", ("*unfinished (recorded, step N)*: an earlier workspace's report "
                       "recorded this run's evaluations to step N, and its backup is not in "
                       "this workspace; a run started anew here replaces them once it has "
                       "logged more steps.")]
    if any(run["status"] == RECORDED_STATUS for run, _, _ in rows):
        lines += ["", (f"*{RECORDED_STATUS}*: the run's directory is not in this workspace "
                       "(`runs/` is not in git); its logged evaluations, settings and wall "
                       "time are the ones an earlier report of its study committed "
                       "(`<study>_loss.csv`, `<study>_config.json`), checked like a run on "
                       "disk.")]
    if references:
        lines += ["", ("*Italic* rows: reference runs of other studies (`references` in the "
                       "config), checked to have been trained with this study's settings "
                       "(the seed aside: a different seed is named). Their own study's "
                       "report is where they come from.")]
    lines.append("")
    return "\n".join(lines)

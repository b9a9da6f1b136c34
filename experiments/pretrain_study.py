"""Pre-training studies: every variant trained identically, each run recorded, one report.

`run_study` trains the variants of a config one after the other, each in its own
resumable run folder `<runs_dir>/<study>/<variant>` (`keras_tupe.pretraining`: a run
stopped and started again continues from its last backup and ends with the same
weights). When a run finishes or stops (Ctrl-C, SIGTERM, `until_step`), and when a
finished run is skipped, its record is written to `<results_dir>/records/<study>/
<variant>/`: `metrics.csv` (the run's log) and `run_config.json` (the run's own
`run_config.json` with its status, wall time, encoder config and vocabulary record).

`report` reads those records alone, checks that the runs were trained identically, and
writes `<study>_loss.csv`, `<study>_val_loss.png` (TUPE Figure 4a), `<study>_pairs.csv`,
`<study>_table.md` and `<study>_config.json` into the results folder.
"""

import glob
import json
import os
import shutil
import statistics

from experiments import config as study_config
from experiments import records
from experiments.config import StudyError

RECORD = "run_config.json"
FRACTIONS = (0.25, 0.5, 1.0)
# Fields of `run_config.json` that may differ between the runs of a study.
FREE_FIELDS = ("preset", "out")


def run_study(config, command, only=None, verbose=2, until_step=None, record_only=False):
    """Trains (or resumes, or skips) every selected variant, writing each one's record;
    with `record_only`, writes the records of the run folders there are and trains nothing."""
    import keras

    from keras_tupe.pretraining import pretrain

    selected = _select(config, only)
    study_config.ensure_vocabulary(config, command=command)
    if record_only:
        for variant in selected:
            written = write_record(config, variant)
            print(f"[{config['study']}] {variant.name}: "
                  + (f"{written['status']}, recorded" if written else "no run folder"), flush=True)
        return
    print(cost(config, selected, until_step), flush=True)
    with study_config.registered_presets(config):
        for variant in selected:
            prefix = f"[{config['study']}] {variant.name}"
            record = os.path.join(records.record_dir(config, variant.name), RECORD)
            if os.path.exists(record) and not os.path.exists(variant.run_dir):
                print(f"{prefix}: recorded in {record}, its run folder is not here: skipped "
                      "(delete the record's folder to train it again)", flush=True)
                continue
            try:
                if variant.is_finished:
                    print(f"{prefix}: finished, skipped ({variant.run_dir})", flush=True)
                else:
                    print(f"{prefix}: pre-training {variant.preset} -> {variant.run_dir}",
                          flush=True)
                    keras.backend.clear_session()
                    pretrain(study_config.pretrain_config(config, variant, verbose=verbose),
                             until_step=until_step)
            finally:  # also when stopped: the record is always there to commit
                written = write_record(config, variant)
                if written:
                    print(f"{prefix}: {written['status']}, recorded in "
                          f"{os.path.dirname(record)}", flush=True)


def _select(config, only):
    all_variants = study_config.variants(config)
    names = [v.name for v in all_variants]
    unknown = sorted(set(only or ()) - set(names))
    if unknown:
        raise StudyError(f"{config['_path']} has no variant(s) {unknown}. Variants: {names}")
    return [v for v in all_variants if not only or v.name in only]


def write_record(config, variant):
    """Copies a run's log and settings into its record folder; returns the record, or None
    for a run that has no folder (not started, or stopped before its first backup)."""
    run_config = records.read_json(os.path.join(variant.run_dir, RECORD))
    if run_config is None:
        return None
    rows, wall = records.read_metrics(variant.run_dir)
    step = rows[-1]["step"] if rows else 0
    folder = records.record_dir(config, variant.name)
    os.makedirs(folder, exist_ok=True)
    if rows:
        shutil.copyfile(os.path.join(variant.run_dir, "metrics.csv"),
                        os.path.join(folder, "metrics.csv"))
    record = {**run_config, "status": _status(config, variant, step), "last_step": step,
              "wall_seconds": wall,
              "backbone_config": study_config.run_backbone_config(variant.run_dir),
              "vocabulary": study_config.read_vocabulary_record(config)}
    records.write_json(os.path.join(folder, RECORD), record)
    return record


def _status(config, variant, step):
    if variant.is_finished:
        return "finished"
    if step == config["settings"]["steps"]:  # trained elsewhere; its models did not come back
        return "trained all its steps; the final model is not in its run folder"
    return f"stopped at step {step}"


def cost(config, selected, until_step=None):
    """What the selected runs cost at most: their steps, and the time at the median seconds
    a step of the committed records of runs of the same size and tokens a step."""
    settings = config["settings"]
    steps = until_step or settings["steps"]
    shape = (settings["batch_size"], settings["seq_len"])
    per_step = recorded_step_seconds(config["results_dir"], config["size"], shape)
    line = (f"[{config['study']}] {len(selected)} run(s) x {steps:,} steps = "
            f"{len(selected) * steps:,} steps at most")
    if per_step:
        median = statistics.median(per_step)
        line += (f", about {records.format_seconds(median * steps * len(selected))} at "
                 f"{median:.2f} s a step (the median of {len(per_step)} recorded "
                 f"{config['size']} runs of {shape[0]} x {shape[1]} tokens)")
    return line


def recorded_step_seconds(results_dir, size, shape):
    """The seconds a step of every committed pre-training record of a `size` preset at
    `shape` (batch, tokens), its whole wall time over its steps, of runs on machines with as
    many cores as this one (`versions()["machine"]`: "x86_64, 2 cores, ..."), so that the
    GPU machine's runs do not time a CPU's."""
    per_step, here = [], _cores(records.machine())
    for path in glob.glob(os.path.join(results_dir, "records", "*", "*", RECORD)):
        record = records.read_json(path)
        run = record["config"]
        if (record["last_step"] and run["preset"].endswith(f"_{size}")
                and (run["batch_size"], run["seq_len"]) == tuple(shape)
                and _cores(record.get("versions") or {}) == here):
            per_step.append(record["wall_seconds"] / record["last_step"])
    return per_step


def _cores(versions):
    """"x86_64, 2 cores" of a versions record's machine ("x86_64, 2 cores, Linux-...")."""
    return ", ".join((versions.get("machine") or "").split(", ")[:2])


# === Report ===

def read_runs(config):
    """Every variant of a study with its record (`"not started"` without one).

    Raises `StudyError`, naming the runs and fields, when a run was trained with other
    settings than the config's (or than another run's), another vocabulary, or an encoder
    other than its preset plus the allowed overrides.
    """
    runs, problems, reference = [], [], None
    for variant in study_config.variants(config):
        folder = records.record_dir(config, variant.name)
        record = records.read_json(os.path.join(folder, RECORD))
        runs.append({"variant": variant, "record": record, "folder": folder,
                     "rows": records.read_metrics(folder)[0] if record else [],
                     "status": record["status"] if record else "not started",
                     "wall_seconds": record["wall_seconds"] if record else None})
        if record is None:
            continue
        name, saved, where = variant.name, record["config"], os.path.join(folder, RECORD)
        expected = json.loads(json.dumps(
            study_config.pretrain_config(config, variant).resume_key()))
        problems += [f"{name}: {key} is {saved.get(key)!r} in {where}, the config says "
                     f"{expected.get(key)!r}" for key in sorted(set(saved) | set(expected))
                     if key != "out" and saved.get(key) != expected.get(key)]
        shared = {k: v for k, v in saved.items() if k not in FREE_FIELDS}
        shared.update(replicas=record.get("replicas"), vocabulary=record["vocabulary_sha256"],
                      initialization=record.get("initialization"))
        if reference is None:
            reference = (name, shared)
        problems += [f"{name} and {reference[0]} differ in {key}: {shared.get(key)!r} vs "
                     f"{reference[1].get(key)!r}" for key in sorted(set(shared) | set(
                         reference[1])) if shared.get(key) != reference[1].get(key)]
        vocabulary = record.get("vocabulary") or {}
        if (vocabulary.get("sha256") != record["vocabulary_sha256"] or vocabulary.get(
                "settings") != study_config.vocabulary_settings(config["vocabulary"])):
            problems.append(f"{name}: vocabulary sha256 {record['vocabulary_sha256']} is not "
                            "that of a vocabulary trained with the config's settings "
                            f"({vocabulary.get('sha256')}, {vocabulary.get('settings')})")
        backbone = record.get("backbone_config")
        if backbone is not None:
            problems += [f"{name}: its encoder has {key}={backbone.get(key)!r}, the preset "
                         f"{variant.base_preset} with {variant.overrides} says {value!r}"
                         for key, value in study_config.expected_backbone(variant).items()
                         if key != "vocabulary_size" and backbone.get(key) != value]
            if backbone.get("dropout") != config["settings"].get("dropout", 0.1):
                problems.append(f"{name}: encoder dropout {backbone.get('dropout')}")
    if problems:
        raise StudyError(
            f"The runs of study {config['study']!r} were not trained identically; refusing to "
            "report them as one study:\n  " + "\n  ".join(problems))
    return runs


def read_references(config, own_runs=None):
    """The runs of other studies named by `references`, as `(study config, run)` pairs.

    Raises `StudyError` when a reference study was trained with other settings
    than this one (the seed aside), another size or vocabulary, or lacks a named
    variant: a curve drawn beside the study's own must be comparable with them, and
    when its runs started from another initialization than this study's (`own_runs`:
    this study's `read_runs`, when the caller has them).
    """
    result = []
    mine = {run["record"].get("initialization") for run in (
        read_runs(config) if own_runs is None else own_runs) if run["record"]}
    for file, names in config.get("references", {}).items():
        other = study_config.load_config(study_config.locate(file, config["_dir"]),
                                         kind="pretrain")
        if other["study"] == config["study"]:
            raise StudyError(f"{config['_path']}: `references` names its own study ({file}); "
                             "its runs are in the report already.")
        differing = study_config.differing_settings(config, other, free=("seed",))
        if differing:
            raise StudyError(
                f"{config['_path']}: the reference study {file} was trained with other "
                f"{differing} than this one; only runs with the same settings (the seed may "
                "differ) can be drawn beside its own.")
        runs = {run["variant"].name: run for run in read_runs(other)}
        theirs = {runs[name]["record"].get("initialization") for name in names
                  if name in runs and runs[name]["record"]}
        if mine and theirs and mine != theirs:
            raise StudyError(
                f"{config['_path']}: the reference study {file} started its weights "
                f"{sorted(theirs)}, this study {sorted(mine)} (initialization in the records' "
                "run_config.json): runs of the two initializations are not drawn as one.")
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
    """Writes the study's CSV, plot, pairs, table and config record; returns their paths."""
    runs = read_runs(config)
    references = read_references(config, runs)
    started = [run for run in runs if run["rows"]]
    if not started:
        raise StudyError(f"No run of study {config['study']!r} has a record yet (looked in "
                         f"{records.record_dir(config)}). Pre-train first: "
                         f"python -m experiments.run pretrain {' '.join(config['_flag'])}")
    out_dir, study = config["results_dir"], config["study"]
    tokens_per_step = config["settings"]["batch_size"] * config["settings"]["seq_len"]
    vocabulary = started[0]["record"]["vocabulary"]
    header = [f"command: {command}", f"study config: {config['_path']}"]
    rows = [{"variant": run["variant"].name, "preset": run["variant"].preset,
             "tokens": row["step"] * tokens_per_step, **row}
            for run in started for row in run["rows"]]
    paths = {"csv": records.write_csv(
        os.path.join(out_dir, f"{study}_loss.csv"),
        ("variant", "preset", "step", "tokens") + records.METRIC_COLUMNS[1:], rows, header)}
    paths["png"] = _plot(config, started, os.path.join(out_dir, f"{study}_val_loss.png"),
                         references)
    paths["pairs"] = records.write_csv(
        os.path.join(out_dir, f"{study}_pairs.csv"), PAIR_COLUMNS,
        pair_differences([(run["variant"].name, run) for run in started] + [
            (_reference_label(config, other, run), run) for other, run in references]),
        header + ["diff = val_loss(a) - val_loss(b) at the evaluations both logged; "
                  "a_lower: how many of them a was below b"])
    paths["table"] = records.write_text(os.path.join(out_dir, f"{study}_table.md"),
                                        _table(config, runs, command, vocabulary, references))
    paths["config"] = records.write_json(os.path.join(out_dir, f"{study}_config.json"), {
        "command": command, "study_config": study_config.resolved(config), "vocabulary": vocabulary,
        "runs": {run["variant"].name: {
            "preset": run["variant"].preset, "variant": run["variant"].variant,
            "structural_overrides": run["variant"].overrides, "status": run["status"],
            "wall_seconds": run["wall_seconds"], "record": run["folder"] if run["record"]
            else None} for run in runs},
        "references": [{"study": other["study"], "config": other["_path"],
                        "variant": run["variant"].name, "seed": other["settings"]["seed"],
                        "status": run["status"], "record": run["folder"]}
                       for other, run in references]})
    return paths


PAIR_COLUMNS = ("a", "b", "evaluations", "a_lower", "diff_min", "diff_max", "final_step",
                "diff_final")


def pair_differences(named_runs):
    """Per pair of runs, how their validation losses differ over the shared evaluations.

    The numbers results.md quotes ("below at all 20 evaluations, by 0.02 to 0.08")
    come from here rather than from subtracting CSV columns by hand.
    """
    curves = [(name, validation_losses(run)) for name, run in named_runs]
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


def validation_losses(run):
    """`{step: validation loss}` of a run's logged evaluations."""
    return {r["step"]: r["val_loss"] for r in run["rows"] if r["val_loss"] is not None}


def _reference_label(config, other, run):
    seed = other["settings"]["seed"]
    return (f"{run['variant'].name} ({other['study']}"
            + ("" if seed == config["settings"]["seed"] else f", seed {seed}") + ")")


def _plot(config, runs, path, references=()):
    settings = config["settings"]
    figure, axis = records.pyplot().subplots(figsize=(7, 4.5))
    curves = [(run, False, run["variant"].name) for run in runs] + [
        (run, True, _reference_label(config, other, run)) for other, run in references]
    styles = {}  # one colour and marker per variant name: a reference of it shares them
    for run, is_reference, label in curves:
        name = run["variant"].name
        style = dict(styles.setdefault(name, records.line_style(len(styles))))
        if is_reference:
            style.update(linestyle=":")
        points = sorted(validation_losses(run).items())
        if points:
            axis.plot(*zip(*points), ms=2.5, lw=1.0 if is_reference else 1.3, label=label,
                      **style)
    axis.set_xlabel(f"pre-training step (× {settings['batch_size'] * settings['seq_len']:,} tokens)")
    axis.set_ylabel("validation masked-LM loss")
    axis.set_title(f"{config['study']}: {config['size']} encoders, identical data and settings",
                   fontsize=10)
    axis.grid(alpha=0.3)
    records.legend_outside(axis)
    return records.save_figure(figure, path)


def _table(config, runs, command, vocabulary, references=()):
    settings = config["settings"]
    steps = settings["steps"]
    tokens = steps * settings["batch_size"] * settings["seq_len"]
    columns = fraction_steps(config)
    lines = [
        f"# Study `{config['study']}`: validation masked-LM loss",
        "",
        (f"Runs: `python -m experiments.run pretrain {' '.join(config['_flag'])}`; this table, "
         f"the CSV and the plot: `{command}`"),
        "",
        *([config["description"], ""] if config.get("description") else []),
        (f"Every run: `{config['size']}` encoders, {steps:,} steps × {settings['batch_size']} × "
         f"{settings['seq_len']} tokens = {tokens:,} tokens, peak LR "
         f"{settings['learning_rate']:g}, seed {settings['seed']}, the shared vocabulary "
         f"(sha256 `{vocabulary['sha256'][:16]}…`); validation on "
         f"{settings.get('valid_batches', 50)} fixed batches every "
         f"{settings.get('eval_every', 1000)} steps. The settings of every run are in its "
         f"record (`records/{config['study']}/<variant>/run_config.json`) and were checked "
         "identical."),
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
    machines = sorted({run["record"]["versions"]["machine"] for run, _, _ in rows
                       if run["record"]})
    lines += ["", "Wall time: training and validation, summed over the processes that ran the "
                  "run (start-up and the shared vocabulary not included). Machine: "
              + "; ".join(machines) + "."]
    if references:
        lines += ["", ("*Italic* rows: reference runs of other studies (`references` in the "
                       "config), checked to have been trained with this study's settings "
                       "(the seed aside: a different seed is named). Their own study's "
                       "report is where they come from.")]
    lines.append("")
    return "\n".join(lines)

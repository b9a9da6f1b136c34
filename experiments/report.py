"""Every page of `docs/results/`, made from the committed records alone.

    python -m experiments.run report [--study NAME | --config FILE]
    python -m experiments.claims [--out DIR]

`report` writes each recorded study's own pages (a pre-training study's by `study_pages`:
`<study>_loss.csv`, `_val_loss.png` (TUPE Figure 4a), `_pairs.csv`, `_table.md`,
`_config.json`; a fine-tuning or length study's by its module's `report`), then the pages
over several studies that the chosen ones are part of: a study with its seed replicates
(`seed_pages`: `<study>_seeds.*`), seed groups in one figure (`GROUP_COMPARISONS`), studies
that differ only in their `overrides` (`COMPARISONS`: `<name>_compare.*`) and, without a
study, the positional maps again from their arrays. `claims` writes what `docs/results.md`
quotes for the papers' claims that no other page prints (T2 in loss, the two pipelines, the
plateau control).
Nothing here reads `runs/`: from the same records, the same bytes (tested).
"""

import argparse
import glob
import itertools
import json
import os
import statistics

from experiments import config as study_config
from experiments import finetune_study, length_study, records
from experiments.config import StudyError
from experiments.maps import redraw_maps
from experiments.pretrain_study import RECORD

# Fractions of the budget: the columns of a study's table (each saved checkpoint's own
# fraction is added) and of a seed page.
FRACTIONS = (0.25, 0.5, 1.0)
SEED_FRACTIONS = (0.3, 0.5, 1.0)
# Fields of `run_config.json` that may differ between the runs of a study.
FREE_FIELDS = ("preset", "out", "backbone_overrides")
LOSS_LABEL = "validation masked-LM loss"


# === Reading the records ===

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
        # With its encoder's config recorded, a run is checked by that encoder (below), not by
        # how the preset was named: `huang_m4_mini` with overrides, or a preset of their own.
        free = ("out", "preset", "backbone_overrides") if record.get("backbone_config") else (
            "out",)
        problems += [f"{name}: {key} is {saved.get(key)!r} in {where}, the config says "
                     f"{expected.get(key)!r}" for key in sorted(set(saved) | set(expected))
                     if key not in free and saved.get(key) != expected.get(key)]
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
        other = _referenced(config, file)
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


def _referenced(config, file):
    return study_config.load_config(study_config.locate(file, config["_dir"]), kind="pretrain")


def validation_losses(run):
    """`{step: validation loss}` of a run's logged evaluations."""
    return {r["step"]: r["val_loss"] for r in run["rows"] if r["val_loss"] is not None}


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


def _tokens_per_step(config):
    return config["settings"]["batch_size"] * config["settings"]["seq_len"]


def _machines(runs):
    return "; ".join(sorted({run["record"]["versions"]["machine"] for run in runs
                             if run["record"]}))


# === Shared writers ===

def _finish(figure, axis, path, xlabel, title, tight=False):
    axis.set_xlabel(xlabel)
    axis.set_ylabel(LOSS_LABEL)
    axis.set_title(title, fontsize=10)
    axis.grid(alpha=0.3)
    if tight:
        figure.tight_layout()
    records.legend_outside(axis)
    return records.save_figure(figure, path)


def _loss(value):
    return "–" if value is None else f"{value:.3f}"


# === A pre-training study's pages ===

PAIR_COLUMNS = ("a", "b", "evaluations", "a_lower", "diff_min", "diff_max", "final_step",
                "diff_final")


def study_pages(config, command):
    """Writes the study's CSV, plot, pairs, table and config record; returns their paths."""
    runs = read_runs(config)
    references = read_references(config, runs)
    started = [run for run in runs if run["rows"]]
    if not started:
        raise StudyError(f"No run of study {config['study']!r} has a record yet (looked in "
                         f"{records.record_dir(config)}). Pre-train first: "
                         f"python -m experiments.run pretrain {' '.join(config['_flag'])}")
    out_dir, study = config["results_dir"], config["study"]
    vocabulary = started[0]["record"]["vocabulary"]
    header = [f"command: {command}", f"study config: {config['_path']}"]
    rows = [{"variant": run["variant"].name, "preset": run["variant"].preset,
             "tokens": row["step"] * _tokens_per_step(config), **row}
            for run in started for row in run["rows"]]
    paths = records.write_pages(
        out_dir, f"{study}_loss.csv",
        ("variant", "preset", "step", "tokens") + records.METRIC_COLUMNS[1:], rows, header,
        f"{study}_val_loss.png", lambda path: _study_plot(config, started, path, references),
        f"{study}_table.md", _study_table(config, runs, command, vocabulary, references))
    paths["pairs"] = records.write_csv(
        os.path.join(out_dir, f"{study}_pairs.csv"), PAIR_COLUMNS,
        pair_differences([(run["variant"].name, run) for run in started] + [
            (_reference_label(config, other, run), run) for other, run in references]),
        header + ["diff = val_loss(a) - val_loss(b) at the evaluations both logged; "
                  "a_lower: how many of them a was below b"])
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


def _reference_label(config, other, run):
    seed = other["settings"]["seed"]
    return (f"{run['variant'].name} ({other['study']}"
            + ("" if seed == config["settings"]["seed"] else f", seed {seed}") + ")")


def _study_plot(config, runs, path, references=()):
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
    return _finish(figure, axis, path,
                   f"pre-training step (× {_tokens_per_step(config):,} tokens)",
                   f"{config['study']}: {config['size']} encoders, identical data and settings")


def _study_table(config, runs, command, vocabulary, references=()):
    settings = config["settings"]
    steps = settings["steps"]
    columns = fraction_steps(config)
    lines = [
        f"# Study `{config['study']}`: validation masked-LM loss",
        "",
        (f"Runs: `python -m experiments.run pretrain {' '.join(config['_flag'])}`; this table, "
         f"the CSV and the plot: `{command}`"),
        "",
        *([config["description"], ""] if config.get("description") else []),
        (f"Every run: `{config['size']}` encoders, {steps:,} steps × {settings['batch_size']} × "
         f"{settings['seq_len']} tokens = {steps * _tokens_per_step(config):,} tokens, peak LR "
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
        speed = records.median_tokens_per_second(run["rows"])
        overrides = ", ".join(f"{k}={v}" for k, v in variant.overrides.items())
        preset = variant.preset + (f" ({overrides})" if overrides else "")
        lines.append(
            f"| {name} | {preset} | " + " | ".join(map(_loss, losses))
            + f" | {_loss(by_step.get(columns[1.0], {}).get('val_accuracy'))} | "
            f"{records.format_seconds(run['wall_seconds']) if run['rows'] else '–'} | "
            f"{'–' if speed is None else f'{speed:,.0f}'} | {status} |")
    lines += ["", "Wall time: training and validation, summed over the processes that ran the "
                  "run (start-up and the shared vocabulary not included). Machine: "
              + _machines(run for run, _, _ in rows) + "."]
    if references:
        lines += ["", ("*Italic* rows: reference runs of other studies (`references` in the "
                       "config), checked to have been trained with this study's settings "
                       "(the seed aside: a different seed is named). Their own study's "
                       "report is where they come from.")]
    lines.append("")
    return "\n".join(lines)


# === Seed replicates: a study and the studies that differ from it only in the seed ===

SEED_COLUMNS = ("variant", "step", "tokens", "seeds", "mean", "lowest", "highest", "by_seed")
# Seed groups drawn in one figure, `<name>.png`: name -> (base study, its label) of each
# group (the base study with its replicates), the first drawn first. They may differ in the
# initialization and the input (`corpus` or `shards`), which is what they compare; budget,
# model and vocabulary agree.
GROUP_COMPARISONS = {
    # The long runs on the old initialization (CPU) and on the corrected one (GPU).
    "long_seeds_compare": (("long", "old initialization, CPU"),
                           ("long_v2_jax", "corrected initialization, GPU")),
}
GROUP_FREE_SETTINGS = ("seed", "corpus", "valid_corpus", "shards", "valid_shards")


def seed_groups(configs):
    """`{study: ([its config, its replicates' configs...], the variants they name)}`: a
    replicate (`"seed": N`, a `base`) names the study it repeats in `references`."""
    groups = {}
    for config in configs:
        if "seed" not in config:
            continue
        for file, names in config.get("references", {}).items():
            other = _referenced(config, file)
            members, variants = groups.setdefault(other["study"], ([other], []))
            members.append(config)
            variants += [name for name in names if name not in variants]
    return groups


def _seed_curves(configs, only=None):
    """`{variant: {seed: {step: val_loss}}}` of the studies' records."""
    curves = {}
    for config in configs:
        for run in read_runs(config):
            variant = run["variant"].name
            losses = validation_losses(run)
            if losses and (not only or variant in only):
                curves.setdefault(variant, {})[config["settings"]["seed"]] = losses
    return curves


def seed_pages(configs, name, command, only=None):
    """Writes `<name>_seeds.csv` (per variant and logged step: the validation loss of every
    seed, their mean, lowest and highest), `.png` (TUPE Figure 4a at small scale: the mean
    against tokens, the band from the lowest to the highest seed around it) and `.md` (per
    variant the loss at `SEED_FRACTIONS` of the budget; per pair of variants the gap
    between their means against the spread across seeds; each variant at 30% and 50%
    against the others at 100%, TUPE's claim); returns their paths."""
    _check_replicates(configs)
    curves = _seed_curves(configs, only)  # variant -> {seed: {step: val_loss}}
    order = [v.name for v in study_config.variants(configs[0])]
    variants = sorted(curves, key=lambda v: order.index(v) if v in order else len(order))
    if not variants:
        raise StudyError(f"None of the studies {[c['study'] for c in configs]} has logged a "
                         "step yet: pre-train them first.")
    summaries = {v: _summarize(curves[v]) for v in variants}
    rows = [{"variant": v, "step": step, "tokens": step * _tokens_per_step(configs[0]),
             **{k: s[k] for k in ("seeds", "mean", "lowest", "highest")},
             "by_seed": json.dumps(s["by_seed_values"])}
            for v in variants for step, s in summaries[v].items()]
    header = [f"command: {command}", "studies (seed): " + "; ".join(
        f"{c['study']} ({c['settings']['seed']})" for c in configs)]
    return records.write_pages(
        configs[0]["results_dir"], f"{name}_seeds.csv", SEED_COLUMNS, rows, header,
        f"{name}_seeds.png", lambda path: _seed_plot(variants, summaries, configs, path),
        f"{name}_seeds.md", _seed_table(configs, variants, curves, summaries, name, command))


def group_figure(groups, name, out_dir=None):
    """Draws seed groups (`[(label, [base config and replicates], variants)]`) in one
    figure, `<out_dir>/<name>.png` (default: the first study's results folder): each variant
    of each group as its mean and seed band."""
    study_config.require_alike([configs[0] for _, configs, _ in groups], GROUP_FREE_SETTINGS,
                               f"seed groups in one figure differ only in "
                               f"{list(GROUP_FREE_SETTINGS)} and the initialization.")
    series = []
    for label, configs, variants in groups:
        _check_replicates(configs)
        curves = _seed_curves(configs, variants)
        series += [(f"{v}, {label}", _summarize(curves[v])) for v in variants if v in curves]
    path = os.path.join(out_dir or groups[0][1][0]["results_dir"], f"{name}.png")
    return {"png": _seed_plot([label for label, _ in series], dict(series), groups[0][1], path,
                              title=" vs ".join(configs[0]["study"] for _, configs, _ in groups)
                              + ": seeds as bands")}


def _check_replicates(configs):
    studies = [c["study"] for c in configs]
    seeds = [c["settings"]["seed"] for c in configs]
    if len(set(seeds)) != len(seeds):
        raise StudyError(f"the studies {studies} must each have a seed of their own; their "
                         f"seeds are {seeds}.")
    study_config.require_alike(configs, ("seed",), "replicates differ only in the seed.")


def _summarize(by_seed):
    """`{step: {seeds, mean, lowest, highest, by_seed_values}}` at the steps every seed
    logged."""
    common = sorted(set.intersection(*(set(losses) for losses in by_seed.values())))
    result = {}
    for step in common:
        values = {seed: by_seed[seed][step] for seed in sorted(by_seed)}
        result[step] = {"seeds": len(values), "mean": statistics.fmean(values.values()),
                        "lowest": min(values.values()), "highest": max(values.values()),
                        "by_seed_values": {str(seed): v for seed, v in values.items()}}
    return result


def _cell(summary, step):
    s = summary.get(step)
    if s is None:
        return "–"
    if s["seeds"] == 1:
        return f"{s['mean']:.3f}"
    return f"{s['mean']:.3f} ({s['lowest']:.3f}–{s['highest']:.3f})"


def _gap(curves, a, step_a, b, step_b):
    """`(mean of a - mean of b, [a - b seed by seed])` over the seeds both logged."""
    seeds = sorted(s for s in set(curves[a]) & set(curves[b])
                   if step_a in curves[a][s] and step_b in curves[b][s])
    if not seeds:
        return None, []
    diffs = [curves[a][s][step_a] - curves[b][s][step_b] for s in seeds]
    return statistics.fmean(diffs), diffs


def _seed_table(configs, variants, curves, summaries, name, command):
    first = configs[0]
    settings = first["settings"]
    # The evaluation step of each fraction, logged or not yet: a cell or gap at a step some
    # seed has not reached stays empty.
    at = {f: evaluation_step(first, f) for f in SEED_FRACTIONS}
    seeds = ", ".join(f"`{c['study']}` (seed {c['settings']['seed']})" for c in configs)
    lines = [f"# Seed replicates: `{name}`", "", f"This table, the CSV and the plot: `{command}`",
             "", (f"`{first['size']}` encoders, {settings['steps']:,} steps of "
                  f"{settings['batch_size']} × {settings['seq_len']} tokens; the studies "
                  f"{seeds} differ only in the seed (checked). A cell is the mean validation "
                  "loss over the seeds, with the lowest and highest seed in parentheses."), ""]
    lines += ["| variant | " + " | ".join(f"{f:.0%} (step {at[f]:,})" for f in SEED_FRACTIONS)
              + " | seeds |", "| --- | " + " | ".join("---:" for _ in SEED_FRACTIONS)
              + " | ---: |"]
    for v in variants:
        lines.append(f"| {v} | " + " | ".join(_cell(summaries[v], at[f])
                                               for f in SEED_FRACTIONS)
                     + f" | {len(curves[v])} |")
    if len(variants) > 1:
        for text, steps, gaps in (
                ("**Gaps between variants** at the same step: the difference of the mean "
                 "losses, and the difference seed by seed (seed k of one variant against seed "
                 "k of the other). *Beyond the seed spread*: every seed's difference has the "
                 "same sign and the mean gap is larger than the widest seed range of either "
                 "variant at that step. A step that not every seed of both has logged yet: –.",
                 "step", [(a, at[f], b, at[f], f"{a} − {b}", f"{at[f]:,}")
                          for a, b in itertools.combinations(variants, 2)
                          for f in SEED_FRACTIONS]),
                ("**Early against final** (TUPE's claim: TUPE at 30% of the steps reaches "
                 "BERT's final loss): each variant at 30% and 50% of the budget against every "
                 "other variant at 100%. A negative gap: the early checkpoint is already lower.",
                 "steps", [(a, at[f], b, at[1.0], f"{a} at {f:.0%} − {b} at 100%",
                            f"{at[f]:,} vs {at[1.0]:,}")
                           for a, b in itertools.permutations(variants, 2)
                           for f in SEED_FRACTIONS[:-1]])):
            lines += ["", text, "", f"| pair | {steps} | mean gap | seed by seed | beyond the "
                      "seed spread |", "| --- | ---: | ---: | --- | --- |"]
            lines += [_gap_row(curves, summaries, *gap) for gap in gaps]
    lines += ["", "Validation: the same batches of the validation text for every run and step "
                  "(`valid_batches` × `batch_size` sequences, masked with seed + 1 of each "
                  "study: the masks differ between seeds, the text does not).", ""]
    return "\n".join(lines)


def _gap_row(curves, summaries, a, step_a, b, step_b, label, steps):
    mean, diffs = _gap(curves, a, step_a, b, step_b)
    # Judged only where every seed of both sides has logged the step (the spread is theirs).
    if mean is None or step_a not in summaries[a] or step_b not in summaries[b]:
        return f"| {label} | {steps} | – | – | – |"
    ranges = [summaries[a][step_a]["highest"] - summaries[a][step_a]["lowest"],
              summaries[b][step_b]["highest"] - summaries[b][step_b]["lowest"]]
    beyond = len(diffs) > 1 and records.beyond_seed_spread(diffs, max(ranges))
    verdict = ("yes" if beyond else "no") if len(diffs) > 1 else "one seed"
    return (f"| {label} | {steps} | {mean:+.3f} | "
            + ", ".join(f"{d:+.3f}" for d in diffs) + f" | {verdict} |")


def _seed_plot(variants, summaries, configs, path, title=None):
    figure, axis = records.pyplot().subplots(figsize=(7.5, 4.5))
    for i, v in enumerate(variants):
        points = sorted(summaries[v].items())
        tokens = [step * _tokens_per_step(configs[0]) / 1e6 for step, _ in points]
        style = records.line_style(i)
        seeds = points[0][1]["seeds"] if points else 0
        axis.plot(tokens, [s["mean"] for _, s in points], ms=3, lw=1.4, markevery=max(
            1, len(points) // 12), **style,
            label=f"{v} (mean of {seeds} seeds)" if seeds > 1 else f"{v} (one seed)")
        if seeds > 1:
            axis.fill_between(tokens, [s["lowest"] for _, s in points],
                              [s["highest"] for _, s in points], color=style["color"],
                              alpha=0.2, lw=0, label=f"{v}: lowest to highest seed")
    return _finish(figure, axis, path, "pre-training tokens (millions)",
                   title or ", ".join(c["study"] for c in configs) + ": seeds as bands",
                   tight=True)


# === Comparisons: studies that differ only in their overrides ===

COMPARE_COLUMNS = ("study", "overrides", "variant", "step", "val_loss", "val_accuracy", "loss",
                   "tokens_per_second", "elapsed_seconds")
# The committed comparisons: name -> its studies, the reference first.
COMPARISONS = {
    "speed": ("speed_f32_xla", "speed_bf16_xla", "speed_f32_noxla", "speed_bf16_noxla"),
    "sweep": ("sweep_lr5e4_wu05", "sweep_lr2e4_wu05", "sweep_lr1e3_wu05", "sweep_lr2e4_wu20",
              "sweep_lr5e4_wu20", "sweep_lr1e3_wu20", "sweep_lr2e3_wu20"),
    # TUPE-A's chosen point and its neighbours in learning rate on the corrected initialization.
    "sweep_v2": ("sweep_v2_lr1e3_wu20", "sweep_v2_lr5e4_wu20", "sweep_v2_lr2e3_wu20"),
    # The long runs on the old initialization (shared random values) and on the corrected one.
    "initialization": ("long", "long_v2"),
}
# Settings that may differ between the compared studies: what they vary, and the seed.
FREE_SETTINGS = (*study_config.OVERRIDABLE_FIELDS, "seed")


def _describe(config):
    overrides = config.get("overrides", {})
    return ", ".join(f"{k}={v}" for k, v in overrides.items()) or "base settings"


def _describe_run(config, run, runs):
    """The study's settings, and the run's initialization where the compared runs differ in
    it (their records name it)."""
    initializations = {other["record"].get("initialization") for other in runs.values()}
    return _describe(config) + (f"; initialization={run['record'].get('initialization')}"
                                if len(initializations) > 1 else "")


def compare_pages(configs, name, command):
    """Writes `<name>_compare.csv` (every logged evaluation of every run), `.png` (validation
    loss against steps, one panel a variant, one colour a study) and `.md`: per study and
    variant the median tokens/s and its ratio to the first study's, the validation loss at
    the last step every compared run reached, its largest difference from the first study's
    curve and that difference over the second half of the evaluations both logged (past the
    warm-up and the plateau); per variant the study with the lowest loss there (the sweep's
    choice). Returns their paths."""
    if len(configs) < 2:
        raise StudyError(f"comparison {name!r} needs at least two studies.")
    studies = [c["study"] for c in configs]
    if len(set(studies)) != len(studies):
        raise StudyError(f"comparison {name!r} names a study twice: {studies}")
    study_config.require_alike(configs, FREE_SETTINGS, f"only studies that differ in "
                               f"{list(FREE_SETTINGS)} can be compared (give them one base).")
    runs = {}  # (study, variant) -> run
    for config in configs:
        for run in read_runs(config):
            if run["rows"]:
                runs[config["study"], run["variant"].name] = run
    order = [r.name for c in configs for r in study_config.variants(c)]  # first study first
    variants = sorted({v for _, v in runs}, key=order.index)
    if not variants:
        raise StudyError(f"None of the studies {studies} has logged a step yet: pre-train "
                         "them first.")
    header = [f"command: {command}",
              "studies: " + "; ".join(f"{c['study']} ({_describe(c)})" for c in configs)]
    rows = [{"study": study, "overrides": _describe(config), "variant": variant, **row}
            for config in configs for study in [config["study"]] for variant in variants
            for row in runs.get((study, variant), {"rows": []})["rows"]]
    return records.write_pages(
        configs[0]["results_dir"], f"{name}_compare.csv", COMPARE_COLUMNS, rows, header,
        f"{name}_compare.png", lambda path: _compare_plot(configs, variants, runs, path),
        f"{name}_compare.md", _compare_table(configs, variants, runs, name, command))


def _compare_table(configs, variants, runs, name, command):
    first = configs[0]
    settings = first["settings"]
    lines = [f"# Compared studies: `{name}`", "", f"This table, the CSV and the plot: `{command}`",
             "", (f"`{first['size']}` encoders, {settings['batch_size']} × {settings['seq_len']} "
                  f"tokens a step, the shared vocabulary; the studies differ only in the "
                  f"settings named (checked) and, where named, in the initialization their "
                  f"runs recorded. Runs: `python -m experiments.run pretrain --study "
                  f"STUDY` (`--until-step N` for a partial run)."), ""]
    lines += ["| variant | study | settings | steps run | median tokens/s | speed vs "
              f"`{first['study']}` | val. loss at the common step | largest val. loss "
              f"difference from `{first['study']}` | the difference over the second half: "
              "range (mean) | wall time |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    best, at_common = {}, {}  # at_common: variant -> {study: val. loss at its common step}
    for variant in variants:
        present = [c for c in configs if (c["study"], variant) in runs]
        curves = {c["study"]: validation_losses(runs[c["study"], variant]) for c in present}
        common = set.intersection(*(set(curve) for curve in curves.values()))
        step = max(common) if common else None
        base_run = runs.get((first["study"], variant))
        base_speed = base_run and records.median_tokens_per_second(base_run["rows"])
        for config in present:
            run = runs[config["study"], variant]
            curve = curves[config["study"]]
            speed = records.median_tokens_per_second(run["rows"])
            ratio = (f"{speed / base_speed:.2f}x" if speed and base_speed else "–")
            largest, late = "–", "–"
            if base_run is not None and config is not first:
                base_curve = curves[first["study"]]
                shared = sorted(set(curve) & set(base_curve))
                diffs = [curve[s] - base_curve[s] for s in shared]
                if diffs:
                    largest = f"{max(diffs, key=abs):+.3f} ({len(shared)} evaluations)"
                late = _second_half(shared, diffs)
            loss = curve.get(step) if step is not None else None
            if loss is not None:
                at_common.setdefault(variant, {})[config["study"]] = loss
                if variant not in best or loss < best[variant][1]:
                    best[variant] = (config["study"], loss, step)
            lines.append(
                f"| {variant} | {config['study']} | {_describe_run(config, run, runs)} | "
                f"{run['rows'][-1]['step']:,} | "
                f"{'–' if speed is None else f'{speed:,.0f}'} | {ratio} | "
                f"{'–' if loss is None else f'{loss:.3f} (step {step:,})'} | {largest} | "
                f"{late} | {records.format_seconds(run['wall_seconds'])} |")
    lines += ["", "Lowest validation loss at the common step, per variant: "
              + "; ".join(f"{v}: `{s}` ({loss:.3f} at step {step:,})"
                          for v, (s, loss, step) in best.items()) + "."]
    shared = [v for v in variants if len(at_common.get(v, {})) == len(configs)]
    if shared:
        means = {c["study"]: sum(at_common[v][c["study"]] for v in shared) / len(shared)
                 for c in configs}
        choice = min(means, key=means.get)
        lines += ["", (f"One shared setting for {', '.join(shared)} (the variants every study "
                       f"ran): `{choice}`, the lowest mean of their losses at the common step "
                       f"({means[choice]:.3f}; "
                       + ", ".join(f"`{study}` {mean:.3f}" for study, mean in means.items())
                       + ").")]
    lines += ["", "Tokens/s: median over the run's logged blocks of `eval_every` steps "
                  "(validation and, in the first block, compilation included). Machine: "
              + _machines(runs.values()) + ".", ""]
    return "\n".join(lines)


def _second_half(steps, diffs):
    """The range and mean of `diffs` (at the sorted `steps`) from half the last step on."""
    late = [d for s, d in zip(steps, diffs) if 2 * s >= steps[-1]] if steps else []
    if not late:
        return "–"
    return (f"{min(late):+.3f} to {max(late):+.3f} ({sum(late) / len(late):+.3f}; steps "
            f"{next(s for s in steps if 2 * s >= steps[-1]):,}–{steps[-1]:,}, {len(late)} "
            "evaluations)")


def _compare_plot(configs, variants, runs, path):
    figure, axes = records.pyplot().subplots(
        1, len(variants), figsize=(4.2 * len(variants) + 2.6, 4), squeeze=False, sharey=True)
    for axis, variant in zip(axes[0], variants):
        for i, config in enumerate(configs):
            run = runs.get((config["study"], variant))
            if run is None:
                continue
            points = sorted(validation_losses(run).items())
            axis.plot(*zip(*points), ms=3.5, lw=1.4, **records.line_style(i),
                      label=f"{config['study']} ({_describe_run(config, run, runs)})")
        axis.set_title(variant, fontsize=10)
        axis.set_xlabel("pre-training step")
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel(LOSS_LABEL)
    handles, labels = axes[0][0].get_legend_handles_labels()
    for axis in axes[0][1:]:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    figure.tight_layout()
    records.legend_outside(axes[0][-1], handles, labels)
    return records.save_figure(figure, path)


# === Claims: the numbers results.md quotes that no other page prints ===

CLAIMS = """Numbers `docs/results.md` quotes for the papers' claims that no report page prints.

T2 (TUPE Table 2: TUPE-A at 30% of the pre-training steps matches BERT-A at 100%), read in
masked-LM loss on the long runs (`long_v2_jax` and its seed replicates): for each seed, the
first evaluation at which TUPE-A's validation loss is at or below the final validation loss
of the BERT-A run of the same seed (same data order and masks), as a step, as a share of
BERT-A's steps, as a share of BERT-A's training FLOPs (a TUPE-A step costs more:
`benchmarks.encoders.variant_flops_per_token`), and as a share of BERT-A's measured wall
time.

The plateau control (issue 48 item 3): at the swept setting (peak LR 1e-3, 20% warm-up,
2,000 steps), does a pre-LN BERT-A get below the unigram plateau (`PLATEAU_LOSS`) as TUPE-A
does and post-LN BERT-A does not? For each run of `PLATEAU_RUNS` with a record: its first
evaluation below `PLATEAU_LOSS`, and its loss at steps 1,000 and 2,000; written with its figure
to `docs/results/plateau_control.{md,png}`.

The two pipelines: TUPE-A seed 0 trained on the CPU (TensorFlow and tf.data, `long_v2`)
against the band of the three GPU seeds (JAX and token-id shards: another data order and
other masks), at the evaluations all four logged: how often it lies above and below the band,
and from step `PIPELINE_FROM` on (past the 3,200-step warm-up) how often it lies above the
band's mean and by how much.
"""
# The long runs on the corrected initialization: the base study's seed replicates, whose
# `references` name the base (`seed_groups` puts the three together).
T2_REPLICATES = ("long_v2_jax_seed1", "long_v2_jax_seed2")
T2_FAST, T2_SLOW = "tupe_a", "bert_a"
# The plateau control: (label, study, variant). The post-LN BERT-A of this setting exists on
# the old initialization only (the initialization moved its curve by at most 0.015).
PLATEAU_RUNS = (
    ("post-LN BERT-A, old init., seed 0", "sweep_lr1e3_wu20", "bert_a"),
    ("post-LN TUPE-A, old init., seed 0", "sweep_lr1e3_wu20", "tupe_a"),
    ("post-LN TUPE-A, seed 0", "sweep_v2_lr1e3_wu20", "tupe_a"),
    ("pre-LN BERT-A, seed 0", "plateau_preln", "bert_a_pre"),
    ("pre-LN BERT-A, seed 1", "plateau_preln_seed1", "bert_a_pre"),
    ("pre-LN TUPE-A, seed 0", "plateau_preln", "tupe_a_pre"),
    ("pre-LN TUPE-A, seed 1", "plateau_preln_seed1", "tupe_a_pre"),
)
PLATEAU_LOSS = 6.0
PLATEAU_PAGE = "plateau_control"
# The two pipelines: (study, variant) of the CPU run and of the GPU runs whose band it is
# set against.
PIPELINE_RUN = ("long_v2", T2_FAST)
PIPELINE_BAND = tuple((study, T2_FAST) for study in ("long_v2_jax", *T2_REPLICATES))
PIPELINE_FROM = 4000


def first_step_below(rows, target, or_at=False):
    """The first logged step whose validation loss is below `target` (`or_at`: at or below
    it); None if none."""
    return next((row["step"] for row in rows if row["val_loss"] is not None and (
        row["val_loss"] < target or or_at and row["val_loss"] == target)), None)


def reach_final_loss(fast_folder, slow_folder, fast_step_flops=1.0, slow_step_flops=1.0):
    """When the run recorded in `fast_folder` first reaches the final validation loss of the
    run in `slow_folder` (each folder holds a record's `metrics.csv`).

    Returns a dict: `slow_steps` and `slow_final` (the slow run's last logged step and its
    validation loss there), `step` (the fast run's first evaluation at or below it, None if
    it never gets there) and that step as shares of the slow run's budget: `step_share`
    (steps), `flop_share` (training FLOPs, from the FLOPs of one step of each) and
    `time_share` (wall time, at each run's mean seconds a step over its whole record).
    """
    fast, fast_wall = records.read_metrics(fast_folder)
    slow, slow_wall = records.read_metrics(slow_folder)
    evaluated = [row for row in slow if row["val_loss"] is not None]
    if not fast or not evaluated:
        raise StudyError(f"{fast_folder if not fast else slow_folder} has no logged "
                         "evaluation in its metrics.csv: nothing to compare.")
    slow_steps, slow_final = evaluated[-1]["step"], evaluated[-1]["val_loss"]
    step = first_step_below(fast, slow_final, or_at=True)
    result = {"slow_steps": slow_steps, "slow_final": slow_final, "step": step,
              "step_share": None, "flop_share": None, "time_share": None}
    if step is not None:
        fast_seconds_per_step = fast_wall / fast[-1]["step"]
        result.update(step_share=step / slow_steps,
                      flop_share=step * fast_step_flops / (slow_steps * slow_step_flops),
                      time_share=step * fast_seconds_per_step / slow_wall)
    return result


def step_flops(config, variant):
    """Training FLOPs of one step of a study's variant (`benchmarks.encoders`' count)."""
    from benchmarks import encoders

    if variant.overrides:
        raise StudyError(f"{variant.name} changes {sorted(variant.overrides)} of its preset; "
                         "benchmarks.encoders counts the FLOPs of library presets only.")
    batch, length = config["settings"]["batch_size"], config["settings"]["seq_len"]
    per_token = encoders.variant_flops_per_token(variant.variant, config["size"], length, batch)
    return per_token * batch * length


def t2_rows(group_configs, fast=T2_FAST, slow=T2_SLOW):
    """`reach_final_loss` of `fast` against `slow`, one row a seed of a seed group (a study
    and its replicates), each row also naming its `study` and `seed`."""
    rows = []
    for config in group_configs:
        runs = {run["variant"].name: run for run in read_runs(config)}
        missing = [name for name in (fast, slow) if not (name in runs and runs[name]["record"])]
        if missing:
            raise StudyError(f"{config['study']} has no record of {missing}: pre-train it first.")
        flops = {name: step_flops(config, runs[name]["variant"]) for name in (fast, slow)}
        rows.append({"study": config["study"], "seed": config["settings"]["seed"],
                     "flop_ratio": flops[fast] / flops[slow],
                     **reach_final_loss(runs[fast]["folder"], runs[slow]["folder"],
                                        flops[fast], flops[slow])})
    return rows


def t2_table(rows, fast=T2_FAST, slow=T2_SLOW):
    """The rows of `t2_rows` as a Markdown table."""
    def share(value):
        return "–" if value is None else f"{100 * value:.2f}%"

    lines = [f"T2 in loss: the first evaluation at which {fast} reaches the final validation "
             f"loss of {slow} of the same seed",
             "",
             f"| study | seed | {slow} final (step) | {fast} step | share of steps | "
             "share of FLOPs | share of wall time |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        step = "never" if row["step"] is None else f"{row['step']:,}"
        lines.append(f"| {row['study']} | {row['seed']} | {row['slow_final']:.3f} "
                     f"({row['slow_steps']:,}) | {step} | {share(row['step_share'])} | "
                     f"{share(row['flop_share'])} | {share(row['time_share'])} |")
    ratios = sorted({f"{row['flop_ratio']:.4f}" for row in rows})
    lines += ["",
              f"FLOPs: a {fast} training step costs {' / '.join(ratios)} x a {slow} step "
              "(benchmarks.encoders.variant_flops_per_token: the encoder, 3 x forward; "
              "embeddings and the masked-LM head, alike in both, are not counted). Wall "
              "time: each run's whole recorded time over its steps. A step is a logged "
              "evaluation, so the crossing lies within one evaluation interval before it."]
    return "\n".join(lines)


def plateau_rows(results_dir, runs=PLATEAU_RUNS, loss=PLATEAU_LOSS):
    """One row a recorded run of `runs`: label, status, last step, first step below `loss`,
    and the validation losses at steps 1,000 and 2,000 (None where not logged)."""
    rows = []
    for label, study, variant in runs:
        folder = os.path.join(results_dir, "records", study, variant)
        record = records.read_json(os.path.join(folder, RECORD))
        logged, _ = records.read_metrics(folder)
        if record is None or not logged:
            continue
        by_step = {row["step"]: row["val_loss"] for row in logged}
        rows.append({"label": label, "study": study, "variant": variant,
                     "status": record["status"], "last_step": logged[-1]["step"],
                     "below": first_step_below(logged, loss),
                     "at_1000": by_step.get(1000), "at_2000": by_step.get(2000),
                     "curve": [(row["step"], row["val_loss"]) for row in logged
                               if row["val_loss"] is not None]})
    return rows


def plateau_page(rows, results_dir, loss=PLATEAU_LOSS):
    """Writes `plateau_control.md` and `.png` into `results_dir`; returns their paths."""
    lines = [f"# The plateau control: which runs get below {loss} within 2,000 steps", "",
             "Peak LR 1e-3, 20% warm-up, 2,000 steps of 32 x 128 tokens (the sweep's setting); "
             f"records in `records/<study>/<variant>/`. Made by `python -m experiments.claims`.",
             "", f"| run | study | status | first step below {loss} | loss at 1,000 | "
             "loss at 2,000 |", "| --- | --- | --- | ---: | ---: | ---: |"]
    for row in rows:
        below = "never" if row["below"] is None else f"{row['below']:,}"
        if row["below"] is None and row["last_step"] < 2000:
            below = f"not by {row['last_step']:,}"
        lines.append(f"| {row['label']} | {row['study']} | {row['status']} | {below} | "
                     f"{_loss(row['at_1000'])} | {_loss(row['at_2000'])} |")
    page = records.write_text(os.path.join(results_dir, f"{PLATEAU_PAGE}.md"),
                              "\n".join(lines) + "\n")
    figure, axis = records.pyplot().subplots(figsize=(7, 4.5))
    for index, row in enumerate(rows):
        style = records.line_style(index)
        if "old init." in row["label"]:
            style.update(linestyle=":")
        axis.plot(*zip(*row["curve"]), ms=2.5, lw=1.3, label=row["label"], **style)
    axis.axhline(loss, color="grey", lw=0.8, linestyle="--")
    return page, _finish(figure, axis, os.path.join(results_dir, f"{PLATEAU_PAGE}.png"),
                         "pre-training step (x 4,096 tokens)",
                         f"Pre-LN against post-LN: who leaves the plateau (dashed: {loss})")


def band_position(results_dir, run=PIPELINE_RUN, band=PIPELINE_BAND, from_step=PIPELINE_FROM):
    """Where the validation loss of `run` (a `(study, variant)` of `results_dir`'s records)
    lies against the band (lowest to highest) of the runs of `band`, at the evaluations all
    of them logged: their number, how many lie `above` and `below` the band and, from
    `from_step` on, their number (`late`), how many lie above the band's mean
    (`late_above_mean`) and the difference from that mean (`late_mean`, `late_min`,
    `late_max`)."""
    def curve(study, variant):
        rows, _ = records.read_metrics(os.path.join(results_dir, "records", study, variant))
        return {row["step"]: row["val_loss"] for row in rows if row["val_loss"] is not None}

    single, others = curve(*run), [curve(*member) for member in band]
    steps = sorted(set(single).intersection(*others))
    if not steps:
        raise StudyError(f"{run} and {band} have no evaluation in common in {results_dir}.")
    late = [single[step] - statistics.mean(other[step] for other in others)
            for step in steps if step >= from_step]
    return {"evaluations": len(steps),
            "above": sum(single[step] > max(other[step] for other in others) for step in steps),
            "below": sum(single[step] < min(other[step] for other in others) for step in steps),
            "late": len(late), "late_above_mean": sum(d > 0 for d in late),
            "late_mean": statistics.mean(late) if late else None,
            "late_min": min(late, default=None), "late_max": max(late, default=None)}


def band_text(result, run=PIPELINE_RUN, band=PIPELINE_BAND, from_step=PIPELINE_FROM):
    """`band_position`'s result in words."""
    members = ", ".join("/".join(member) for member in band)
    lines = [f"The two pipelines: {'/'.join(run)} against the band of {members}",
             "",
             f"- at the {result['evaluations']} evaluations all of them logged: above the band "
             f"at {result['above']}, below it at {result['below']}"]
    if result["late"]:
        lines.append(
            f"- from step {from_step:,} ({result['late']} evaluations): above the band's mean "
            f"at {result['late_above_mean']}; the difference from the mean "
            f"{result['late_mean']:+.3f} on average ({result['late_min']:+.3f} to "
            f"{result['late_max']:+.3f})")
    return "\n".join(lines)


def claims(argv=None):
    """`python -m experiments.claims [--out DIR]`: prints T2's table and the two pipelines'
    comparison, writes the plateau page (into `--out`, default the records' results
    folder)."""
    parser = argparse.ArgumentParser(prog="python -m experiments.claims", description=CLAIMS,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="where the plateau page goes (default: the results "
                                      "folder of the records, docs/results)")
    args = parser.parse_args(argv)
    replicate_configs = [study_config.load_config(name) for name in T2_REPLICATES]
    (group_configs, _), = seed_groups(replicate_configs).values()
    print(t2_table(t2_rows(group_configs)))
    results_dir = replicate_configs[0]["results_dir"]
    print("\n" + band_text(band_position(results_dir)) + "\n")
    for path in plateau_page(plateau_rows(results_dir), args.out or results_dir):
        print(f"wrote {path}")
    return 0


# === Every page ===

def report_command(config):
    """The command that regenerates a study's pages, whichever command wrote them."""
    return records.command_line(["report", *config["_flag"]])


def report(reference=None):
    """Writes, from the records alone, the pages of the study `reference` (a name or a
    `.json` file; default: every study of `experiments/studies.json` that has records, and
    the positional maps again from their arrays), and the seed and comparison pages each
    of them is part of; returns `{what: path}`."""
    if reference and reference.endswith(".json"):  # a study in a file, among its folder's
        folder = os.path.dirname(reference)
        every = [study_config.load_config(p)
                 for p in sorted(glob.glob(os.path.join(folder, "*.json")))]
    else:
        every = [study_config.load_config(name) for name in sorted(study_config.studies())]
    named = [c for c in every if reference in (c["study"], c["_path"])] if reference else every
    if reference and not named:  # not among them (or nowhere: load_config says so)
        named = [study_config.load_config(reference)]

    def recorded(config):  # a fine-tuning study that has only pinned its settings: not yet
        folder = records.record_dir(config)
        return any(glob.glob(os.path.join(folder, "**", name), recursive=True)
                   for name in (RECORD, "results.jsonl", finetune_study.SUMMARY_FILE))

    writers = {"pretrain": study_pages, "finetune": finetune_study.report,
               "length": length_study.report}
    paths = {}

    def add(prefix, pages):
        paths.update((f"{prefix} {kind}", page) for kind, page in pages.items())

    for config in named:
        if reference or recorded(config):
            add(config["study"], writers[config["kind"]](config, report_command(config)))
    chosen = {c["study"] for c in named}
    command = records.command_line(["report"])
    groups = seed_groups(every)
    for name, (members, variants) in groups.items():
        if chosen & {c["study"] for c in members} and any(map(recorded, members)):
            add(f"{name} seeds", seed_pages(members, name, command, only=variants))
    for name, bases in GROUP_COMPARISONS.items():
        members = [c["study"] for base, _ in bases for c in groups.get(base, ([], []))[0]]
        if chosen & set(members) and all(base in groups for base, _ in bases):
            add(name, group_figure([(label, *groups[base]) for base, label in bases], name))
    by_name = {c["study"]: c for c in every}
    for name, group in COMPARISONS.items():
        if chosen & set(group) and all(s in by_name for s in group):
            add(f"{name} compare", compare_pages([by_name[s] for s in group], name, command))
    for results in sorted({c["results_dir"] for c in every}) if not reference else ():
        for npz in sorted(glob.glob(os.path.join(results, "maps", "*.npz"))):
            add(npz, redraw_maps(npz))
    return paths

"""Every page of `docs/results/`, made from the committed records alone (never `runs/`: from
the same records, the same bytes; tested). `report` writes each recorded study's pages
(`pretrain_pages`, `finetune_pages`, `length_pages`), then the pages over several studies that
the chosen ones are part of (`seed_pages`, `GROUP_COMPARISONS`, `COMPARISONS`) and the maps;
`claims` what `docs/results.md` quotes that no other page prints. Their commands and pages:
experiments/README.md; their prose: `templates/`.
"""

import argparse
import glob
import itertools
import json
import os
import re
import statistics
import string

import numpy as np

from experiments import config as study_config
from experiments import floors, records
from experiments.config import StudyError
from experiments.maps import redraw_maps

# Fractions of the budget: the columns of a study's table (each saved checkpoint's own
# fraction is added) and of a seed page.
FRACTIONS = (0.25, 0.5, 1.0)
SEED_FRACTIONS = (0.3, 0.5, 1.0)
# Fields of `run_config.json` that may differ between the runs of a study.
FREE_FIELDS = ("preset", "out", "backbone_overrides")
LOSS_LABEL = "validation masked-LM loss"
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
# A fine-tuning job of `finetune` or `finetune_intermediate`, run before each fine-tuning run
# was recorded: each task's median, best rate and seed range, as their CSV had them.
SUMMARY_FILE = "summary.json"
TASK_NAMES = {"squad": "SQuAD F1 (EM)", "cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC",
              "stsb": "STS-B", "rte": "RTE", "qnli": "QNLI", "mnli": "MNLI", "qqp": "QQP",
              "wnli": "WNLI"}
METRIC_NAMES = {"f1": "F1", "accuracy": "acc.", "pearson": "Pearson", "spearman": "Spearman",
                "matthews": "Matthews"}
# The length study's context-free reference, a row of its table.
UNIGRAM = {"pretrain_study": "baseline", "variant": "unigram", "preset": "(no model)",
           "step": 0, "final": True}


# === Writing: templates, tables, figures ===

def prose(name, section, /, **fields):
    """Section `[[section]]` of `templates/<name>.md`, its `$fields` filled in."""
    with open(os.path.join(TEMPLATES, f"{name}.md"), encoding="utf-8") as f:
        parts = re.split(r"^\[\[(\w+)\]\]$", f.read(), flags=re.M)
    return string.Template(dict(zip(parts[1::2], parts[2::2]))[section].strip("\n")).substitute(
        fields)


def _paragraph(text):
    """`text` as a paragraph after the one before it ("" when there is none)."""
    return f"\n\n{text}" if text else ""


def _row(cells):
    return "| " + " | ".join(cells) + " |"


def _table(header, align, rows):
    """A Markdown table: `header`, `align` ("l" or "r" per column), rows of cells."""
    return "\n".join([_row(header), _row("---:" if a == "r" else "---" for a in align),
                      *map(_row, rows)])


def _lines(rows):
    """Rows after a template's table header."""
    return "".join(f"\n{_row(cells)}" for cells in rows)


def _cell(value, spec=".3f"):
    """`value` as a table's cell: "–" when there is none."""
    return "–" if value is None else format(value, spec)


def _figure(draw, path, xlabel, title=None, tight=False, fontsize=8, size=(7, 4.5)):
    """A loss plot: `draw(axis)` draws the lines, the rest is shared; returns `path`."""
    figure, axis = records.pyplot().subplots(figsize=size)
    draw(axis)
    axis.set_xlabel(xlabel)
    axis.set_ylabel(LOSS_LABEL)
    if title is not None:
        axis.set_title(title, fontsize=10)
    axis.grid(alpha=0.3)
    if tight:
        figure.tight_layout()
    records.legend_outside(axis, fontsize=fontsize)
    return records.save_figure(figure, path)


def _write(out_dir, prefix, **pages):
    """Writes each page `kind=(name, content...)` as `<prefix>_<name>` into `out_dir` by its
    ending (CSV: columns, rows, comments; PNG: a function that draws it; Markdown; JSON);
    returns the paths."""
    writers = {".csv": records.write_csv, ".md": records.write_text,
               ".json": records.write_json, ".png": lambda path, draw: draw(path)}
    return {kind: writers[os.path.splitext(name)[1]](os.path.join(out_dir, f"{prefix}_{name}"),
                                                     *content)
            for kind, (name, *content) in pages.items()}


def _header(config, command):
    return [f"command: {command}", f"study config: {config['_path']}"]


# === Reading the pre-training records ===

def read_runs(config):
    """Every variant of a study with its record (`"not started"` without one); raises
    `StudyError`, naming run and field, for a run trained with other settings than the
    config's or another run's, another vocabulary, or another encoder than its preset's."""
    runs, problems, reference = [], [], None
    for variant in study_config.variants(config):
        folder = records.record_dir(config, variant.name)
        record = records.read_json(os.path.join(folder, records.RUN_RECORD))
        runs.append({"variant": variant, "record": record, "folder": folder,
                     "rows": records.read_metrics(folder)[0] if record else [],
                     "status": record["status"] if record else "not started",
                     "wall_seconds": record["wall_seconds"] if record else None})
        if record is None:
            continue
        name, saved = variant.name, record["config"]
        where = os.path.join(folder, records.RUN_RECORD)
        expected = json.loads(json.dumps(
            study_config.pretrain_config(config, variant).resume_key()))
        # With its encoder's config recorded, a run is checked by that encoder (below), not by
        # how the preset was named: `huang_m4_mini` with overrides, or a preset of their own.
        free = FREE_FIELDS if record.get("backbone_config") else ("out",)
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
    """The runs of other studies that `references` names, as `(study config, run)` pairs,
    checked to be trained as this study's `own_runs` were (the seed aside)."""
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


def validation_losses(rows):
    """`{step: validation loss}` of the evaluations among a run's metrics `rows`."""
    return {row["step"]: row["val_loss"] for row in rows if row["val_loss"] is not None}


def _differences(curve, other):
    """The steps both `{step: loss}` curves logged, in order, and `curve - other` at each."""
    steps = sorted(set(curve) & set(other))
    return steps, [curve[step] - other[step] for step in steps]


def evaluation_step(config, fraction):
    """The evaluation step nearest to `fraction` of the study's budget (at least the first)."""
    settings = config["settings"]
    every = settings.get("eval_every", 1000)
    return max(every, round(fraction * settings["steps"] / every) * every)


def fraction_steps(config):
    """`{fraction: step}`: the evaluation step nearest to each of `FRACTIONS`, and each
    saved checkpoint's own fraction where an evaluation falls on it (the long runs' 30%)."""
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


# === A pre-training study's pages ===

PAIR_COLUMNS = ("a", "b", "evaluations", "a_lower", "diff_min", "diff_max", "final_step",
                "diff_final")


def pretrain_pages(config, command):
    """Writes the study's CSV, plot, pairs, table and config record; returns their paths."""
    runs = read_runs(config)
    references = read_references(config, runs)
    started = [run for run in runs if run["rows"]]
    if not started:
        raise StudyError(f"No run of study {config['study']!r} has a record yet (looked in "
                         f"{records.record_dir(config)}). Pre-train first: "
                         f"python -m experiments.run pretrain {' '.join(config['_flag'])}")
    vocabulary, header = started[0]["record"]["vocabulary"], _header(config, command)
    rows = [{"variant": run["variant"].name, "preset": run["variant"].preset,
             "tokens": row["step"] * _tokens_per_step(config), **row}
            for run in started for row in run["rows"]]
    # Per pair of runs, how their validation losses differ over the evaluations both logged
    # (the numbers results.md quotes: "below at all 20 evaluations, by 0.02 to 0.08").
    curves = [(run["variant"].name, validation_losses(run["rows"])) for run in started] + [
        (_reference_label(config, other, run), validation_losses(run["rows"]))
        for other, run in references]
    pairs = []
    for (a, losses_a), (b, losses_b) in itertools.combinations(curves, 2):
        steps, diffs = _differences(losses_a, losses_b)
        if steps:
            pairs.append({"a": a, "b": b, "evaluations": len(steps),
                          "a_lower": sum(d < 0 for d in diffs), "diff_min": min(diffs),
                          "diff_max": max(diffs), "final_step": steps[-1],
                          "diff_final": diffs[-1]})
    return _write(
        config["results_dir"], config["study"],
        csv=("loss.csv", ("variant", "preset", "step", "tokens") + records.METRIC_COLUMNS[1:],
             rows, header),
        png=("val_loss.png", lambda path: _pretrain_plot(config, started, path, references)),
        table=("table.md", _pretrain_table(config, runs, command, vocabulary, references)),
        pairs=("pairs.csv", PAIR_COLUMNS, pairs, header + [prose("pretrain", "pairs")]),
        config=("config.json", {
            "command": command, "study_config": study_config.resolved(config),
            "vocabulary": vocabulary, "runs": {run["variant"].name: {
                "preset": run["variant"].preset, "variant": run["variant"].variant,
                "structural_overrides": run["variant"].overrides, "status": run["status"],
                "wall_seconds": run["wall_seconds"],
                "record": run["folder"] if run["record"] else None} for run in runs},
            "references": [{"study": other["study"], "config": other["_path"],
                            "variant": run["variant"].name, "seed": other["settings"]["seed"],
                            "status": run["status"], "record": run["folder"]}
                           for other, run in references]}))


def _reference_label(config, other, run):
    seed = other["settings"]["seed"]
    return (f"{run['variant'].name} ({other['study']}"
            + ("" if seed == config["settings"]["seed"] else f", seed {seed}") + ")")


def _pretrain_plot(config, runs, path, references):
    def draw(axis):
        styles = {}  # one colour and marker per variant name: a reference of it shares them
        for run, is_reference, label in [(run, False, run["variant"].name) for run in runs] + [
                (run, True, _reference_label(config, other, run)) for other, run in references]:
            name = run["variant"].name
            style = dict(styles.setdefault(name, records.line_style(len(styles))))
            if is_reference:
                style.update(linestyle=":")
            points = sorted(validation_losses(run["rows"]).items())
            if points:
                axis.plot(*zip(*points), ms=2.5, lw=1.0 if is_reference else 1.3, label=label,
                          **style)

    return _figure(draw, path, f"pre-training step (× {_tokens_per_step(config):,} tokens)",
                   f"{config['study']}: {config['size']} encoders, identical data and settings")


def _pretrain_table(config, runs, command, vocabulary, references):
    settings, columns = config["settings"], fraction_steps(config)
    rows = [(run, run["variant"].name, run["status"]) for run in runs] + [
        (run, f"*{_reference_label(config, other, run)}*", f"reference: {run['status']}")
        for other, run in references]
    cells = []
    for run, name, status in rows:
        variant, by_step = run["variant"], {r["step"]: r for r in run["rows"]}
        overrides = ", ".join(f"{k}={v}" for k, v in variant.overrides.items())
        cells.append([name, variant.preset + (f" ({overrides})" if overrides else ""),
                      *(_cell(by_step.get(s, {}).get("val_loss")) for s in columns.values()),
                      _cell(by_step.get(columns[1.0], {}).get("val_accuracy")),
                      records.format_seconds(run["wall_seconds"]) if run["rows"] else "–",
                      _cell(records.median_tokens_per_second(run["rows"]), ",.0f"), status])
    table = _table(["variant", "preset", *(f"{round(f * 100)}% (step {s})" for f, s in
                                           columns.items()),
                    "val. accuracy (100%)", "wall time", "tokens/s", "status"],
                   "ll" + "r" * len(columns) + "rrrl", cells)
    return prose(
        "pretrain", "table", study=config["study"], flags=" ".join(config["_flag"]),
        command=command, description=_paragraph(config.get("description")),
        size=config["size"], steps=f"{settings['steps']:,}", batch_size=settings["batch_size"],
        seq_len=settings["seq_len"], tokens=f"{settings['steps'] * _tokens_per_step(config):,}",
        learning_rate=f"{settings['learning_rate']:g}", seed=settings["seed"],
        sha256=vocabulary["sha256"][:16], valid_batches=settings.get("valid_batches", 50),
        eval_every=settings.get("eval_every", 1000), table=table,
        machines=_machines(run for run, _, _ in rows),
        references=_paragraph(references and prose("pretrain", "references"))) + "\n"


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


def _seed_summaries(configs, only=None):
    """`(curves, summaries)` of replicates: `{variant: {seed: {step: val_loss}}}` and,
    at the steps every seed logged, `{variant: {step: {seeds, mean, lowest, highest, ...}}}`."""
    studies, seeds = [c["study"] for c in configs], [c["settings"]["seed"] for c in configs]
    if len(set(seeds)) != len(seeds):
        raise StudyError(f"the studies {studies} must each have a seed of their own; their "
                         f"seeds are {seeds}.")
    study_config.require_alike(configs, ("seed",), "replicates differ only in the seed.")
    curves = {}
    for config in configs:
        for run in read_runs(config):
            losses = validation_losses(run["rows"])
            if losses and (not only or run["variant"].name in only):
                curves.setdefault(run["variant"].name, {})[config["settings"]["seed"]] = losses
    summaries = {}
    for variant, by_seed in curves.items():
        common = sorted(set.intersection(*(set(losses) for losses in by_seed.values())))
        summaries[variant] = {}
        for step in common:
            values = {seed: by_seed[seed][step] for seed in sorted(by_seed)}
            summaries[variant][step] = {
                "seeds": len(values), "mean": statistics.fmean(values.values()),
                "lowest": min(values.values()), "highest": max(values.values()),
                "by_seed": json.dumps({str(seed): v for seed, v in values.items()})}
    return curves, summaries


def _logged_variants(configs, names):
    """The variants `names` that have logged a step, as the studies list them (the first
    study first); raises `StudyError` when there are none."""
    order = [variant.name for config in configs for variant in study_config.variants(config)]
    if not names:
        raise StudyError(f"None of the studies {[c['study'] for c in configs]} has logged a "
                         "step yet: pre-train them first.")
    return sorted(names, key=order.index)


def seed_pages(configs, name, command, only=None):
    """Writes `<name>_seeds.csv`, `.png` (TUPE Figure 4a at small scale: the mean over the
    seeds against tokens, the seeds as a band) and `.md`; returns their paths."""
    curves, summaries = _seed_summaries(configs, only)
    variants = _logged_variants(configs, curves)
    rows = [{"variant": v, "step": step, "tokens": step * _tokens_per_step(configs[0]), **s}
            for v in variants for step, s in summaries[v].items()]
    header = [f"command: {command}", "studies (seed): " + "; ".join(
        f"{c['study']} ({c['settings']['seed']})" for c in configs)]
    return _write(
        configs[0]["results_dir"], name, csv=("seeds.csv", SEED_COLUMNS, rows, header),
        png=("seeds.png", lambda path: _seed_plot([(v, summaries[v]) for v in variants],
                                                  configs[0], path,
                                                  ", ".join(c["study"] for c in configs))),
        table=("seeds.md", _seed_table(configs, variants, curves, summaries, name, command)))


def group_figure(groups, name, out_dir=None):
    """Draws seed groups (`[(label, [base config and replicates], variants)]`) in one
    figure, `<out_dir>/<name>.png`: each variant of each group as its mean and seed band."""
    study_config.require_alike([configs[0] for _, configs, _ in groups], GROUP_FREE_SETTINGS,
                               f"seed groups in one figure differ only in "
                               f"{list(GROUP_FREE_SETTINGS)} and the initialization.")
    series = []
    for label, configs, variants in groups:
        _, summaries = _seed_summaries(configs, variants)
        series += [(f"{v}, {label}", summaries[v]) for v in variants if v in summaries]
    path = os.path.join(out_dir or groups[0][1][0]["results_dir"], f"{name}.png")
    return {"png": _seed_plot(series, groups[0][1][0], path,
                              " vs ".join(configs[0]["study"] for _, configs, _ in groups))}


def _seed_table(configs, variants, curves, summaries, name, command):
    settings = configs[0]["settings"]
    # The evaluation step of each fraction, logged or not yet: a cell or gap at a step some
    # seed has not reached stays empty.
    at = {f: evaluation_step(configs[0], f) for f in SEED_FRACTIONS}

    def cell(summary, step):
        s = summary.get(step)
        if s is None:
            return "–"
        return f"{s['mean']:.3f}" + (f" ({s['lowest']:.3f}–{s['highest']:.3f})"
                                     if s["seeds"] > 1 else "")

    table = _table(["variant", *(f"{f:.0%} (step {at[f]:,})" for f in SEED_FRACTIONS), "seeds"],
                   "l" + "r" * len(SEED_FRACTIONS) + "r",
                   [[v, *(cell(summaries[v], at[f]) for f in SEED_FRACTIONS), str(len(curves[v]))]
                    for v in variants])
    gaps = {"gaps": [(a, at[f], b, at[f], f"{a} − {b}", f"{at[f]:,}")
                     for a, b in itertools.combinations(variants, 2) for f in SEED_FRACTIONS],
            "early": [(a, at[f], b, at[1.0], f"{a} at {f:.0%} − {b} at 100%",
                       f"{at[f]:,} vs {at[1.0]:,}")
                      for a, b in itertools.permutations(variants, 2)
                      for f in SEED_FRACTIONS[:-1]]}
    return prose(
        "pretrain", "seeds", name=name, command=command, size=configs[0]["size"],
        steps=f"{settings['steps']:,}", batch_size=settings["batch_size"],
        seq_len=settings["seq_len"], table=table,
        seeds=", ".join(f"`{c['study']}` (seed {c['settings']['seed']})" for c in configs),
        gaps="".join(_paragraph(prose("pretrain", section, rows=_lines(
            _gap_row(curves, summaries, *gap) for gap in rows)))
            for section, rows in gaps.items()) if len(variants) > 1 else "") + "\n"


def _gap_row(curves, summaries, a, step_a, b, step_b, label, steps):
    """Cells of `a` at `step_a` minus `b` at `step_b`, over the seeds both logged."""
    seeds = sorted(s for s in set(curves[a]) & set(curves[b])
                   if step_a in curves[a][s] and step_b in curves[b][s])
    # Judged only where every seed of both sides has logged the step (the spread is theirs).
    if not seeds or step_a not in summaries[a] or step_b not in summaries[b]:
        return [label, steps, "–", "–", "–"]
    diffs = [curves[a][s][step_a] - curves[b][s][step_b] for s in seeds]
    ranges = [summaries[a][step_a]["highest"] - summaries[a][step_a]["lowest"],
              summaries[b][step_b]["highest"] - summaries[b][step_b]["lowest"]]
    beyond = len(diffs) > 1 and records.beyond_seed_spread(diffs, max(ranges))
    return [label, steps, f"{statistics.fmean(diffs):+.3f}",
            ", ".join(f"{d:+.3f}" for d in diffs),
            ("yes" if beyond else "no") if len(diffs) > 1 else "one seed"]


def _seed_plot(series, config, path, studies):
    """Each `(label, summaries)` of `series` as its mean over the seeds and their band."""
    def draw(axis):
        for i, (v, summaries) in enumerate(series):
            points = sorted(summaries.items())
            tokens = [step * _tokens_per_step(config) / 1e6 for step, _ in points]
            style = records.line_style(i)
            seeds = points[0][1]["seeds"] if points else 0
            axis.plot(tokens, [s["mean"] for _, s in points], ms=3, lw=1.4, markevery=max(
                1, len(points) // 12), **style,
                label=f"{v} (mean of {seeds} seeds)" if seeds > 1 else f"{v} (one seed)")
            if seeds > 1:
                axis.fill_between(tokens, [s["lowest"] for _, s in points],
                                  [s["highest"] for _, s in points], color=style["color"],
                                  alpha=0.2, lw=0, label=f"{v}: lowest to highest seed")

    return _figure(draw, path, "pre-training tokens (millions)", f"{studies}: seeds as bands",
                   tight=True, size=(7.5, 4.5))


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


def _describe(config, run=None, runs=None):
    """The study's overrides, and the run's initialization where the compared `runs` differ
    in it (their records name it)."""
    text = ", ".join(f"{k}={v}" for k, v in config.get("overrides", {}).items())
    if run and len({other["record"].get("initialization") for other in runs.values()}) > 1:
        return (text or "base settings") + f"; initialization={run['record'].get('initialization')}"
    return text or "base settings"


def compare_pages(configs, name, command):
    """Writes `<name>_compare.csv` (every logged evaluation of every run), `.png` (one
    panel a variant, one colour a study) and `.md`; returns their paths."""
    if len(configs) < 2:
        raise StudyError(f"comparison {name!r} needs at least two studies.")
    studies = [c["study"] for c in configs]
    if len(set(studies)) != len(studies):
        raise StudyError(f"comparison {name!r} names a study twice: {studies}")
    study_config.require_alike(configs, FREE_SETTINGS, f"only studies that differ in "
                               f"{list(FREE_SETTINGS)} can be compared (give them one base).")
    runs = {(config["study"], run["variant"].name): run for config in configs
            for run in read_runs(config) if run["rows"]}
    variants = _logged_variants(configs, {v for _, v in runs})
    header = [f"command: {command}",
              "studies: " + "; ".join(f"{c['study']} ({_describe(c)})" for c in configs)]
    rows = [{"study": config["study"], "overrides": _describe(config), "variant": variant, **row}
            for config in configs for variant in variants
            for row in runs.get((config["study"], variant), {"rows": []})["rows"]]
    return _write(
        configs[0]["results_dir"], name, csv=("compare.csv", COMPARE_COLUMNS, rows, header),
        png=("compare.png", lambda path: _compare_plot(configs, variants, runs, path)),
        table=("compare.md", _compare_table(configs, variants, runs, name, command)))


def _compare_table(configs, variants, runs, name, command):
    first = configs[0]
    rows, best, at_common = [], {}, {}  # at_common: variant -> {study: loss at its common step}
    for variant in variants:
        present = [c for c in configs if (c["study"], variant) in runs]
        curves = {c["study"]: validation_losses(runs[c["study"], variant]["rows"])
                  for c in present}
        common = set.intersection(*(set(curve) for curve in curves.values()))
        step = max(common) if common else None
        base_run = runs.get((first["study"], variant))
        base_speed = base_run and records.median_tokens_per_second(base_run["rows"])
        for config in present:
            run, curve = runs[config["study"], variant], curves[config["study"]]
            speed = records.median_tokens_per_second(run["rows"])
            largest, late = "–", "–"
            if base_run is not None and config is not first:
                shared, diffs = _differences(curve, curves[first["study"]])
                if diffs:
                    largest = f"{max(diffs, key=abs):+.3f} ({len(shared)} evaluations)"
                late = _second_half(shared, diffs)
            loss = curve.get(step)
            if loss is not None:
                at_common.setdefault(variant, {})[config["study"]] = loss
                if variant not in best or loss < best[variant][1]:
                    best[variant] = (config["study"], loss, step)
            rows.append([variant, config["study"], _describe(config, run, runs),
                         f"{run['rows'][-1]['step']:,}", _cell(speed, ",.0f"),
                         f"{speed / base_speed:.2f}x" if speed and base_speed else "–",
                         "–" if loss is None else f"{loss:.3f} (step {step:,})", largest, late,
                         records.format_seconds(run["wall_seconds"])])
    shared, choice = [v for v in variants if len(at_common.get(v, {})) == len(configs)], ""
    if shared:
        means = {c["study"]: sum(at_common[v][c["study"]] for v in shared) / len(shared)
                 for c in configs}
        best_study = min(means, key=means.get)
        choice = prose("pretrain", "shared", variants=", ".join(shared), choice=best_study,
                       mean=f"{means[best_study]:.3f}",
                       means=", ".join(f"`{study}` {mean:.3f}" for study, mean in means.items()))
    settings = first["settings"]
    return prose(
        "pretrain", "compare", name=name, command=command, size=first["size"],
        batch_size=settings["batch_size"], seq_len=settings["seq_len"], first=first["study"],
        rows=_lines(rows), shared=_paragraph(choice), machines=_machines(runs.values()),
        lowest="; ".join(f"{v}: `{s}` ({loss:.3f} at step {step:,})"
                         for v, (s, loss, step) in best.items())) + "\n"


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
            points = sorted(validation_losses(run["rows"]).items())
            axis.plot(*zip(*points), ms=3.5, lw=1.4, **records.line_style(i),
                      label=f"{config['study']} ({_describe(config, run, runs)})")
        axis.set_title(variant, fontsize=10)
        axis.set_xlabel("pre-training step")
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel(LOSS_LABEL)
    legend = {}  # a study's entry from the first panel that drew it
    for axis in axes[0]:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    figure.tight_layout()
    records.legend_outside(axes[0][-1], list(legend.values()), list(legend))
    return records.save_figure(figure, path)


# === A fine-tuning study's pages ===

def finetune_plan(config, only_variants=None, only_checkpoints=None):
    """Every (pre-trained checkpoint, record folder) the study fine-tunes."""
    wanted = config.get("variants")  # every name of `checkpoint_variants` is fine-tuned
    known = {(p["study"], v.name) for p in study_config.related_configs(
        config, "pretrain_configs") for v in study_config.variants(p)
        if not wanted or v.name in wanted}
    for key, names in config.get("checkpoint_variants", {}).items():
        for name in names:
            study, _, variant = name.rpartition("/")
            if not ((study, variant) in known if study else any(v == variant for _, v in known)):
                choices = sorted({v for _, v in known} | {f"{s}/{v}" for s, v in known})
                raise StudyError(f"{config['_path']}: `checkpoint_variants` {key}: no variant "
                                 f"{name!r} among the fine-tuned ones. Valid: {choices}")
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


def protocol(config):
    """The study's `keras_tupe.finetuning.Protocol`."""
    from keras_tupe.finetuning import Protocol

    return Protocol.from_config(config)


def is_squad(config):
    """A SQuAD study: `tasks` is `["squad"]`, fine-tuned on an article split of `squad_file`."""
    return config["tasks"] == ["squad"]


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
        summary.setdefault("runs_expected", protocol(config).size([], tasks))  # summary.json
        job_records.append({**job, **{k: summary[k] for k in ("runs_done", "runs_expected",
                                "wall_seconds", "timed_runs", "train_seconds")}})
    if not any(row["summary"]["runs_done"] for row in table_rows):
        raise StudyError(f"No fine-tuning result yet for study {config['study']!r}: run "
                         f"python -m experiments.run finetune {' '.join(config['_flag'])}")
    floor = floors.majority_class(config)
    header = _header(config, command) + [prose(
        "finetune", "csv_grid" if config.get("selection_seed") is None else "csv_selection",
        seed=config.get("selection_seed"))]
    return _write(
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
        "finetune", "table", command=command, description=_paragraph(config.get("description")),
        title=prose("finetune", "squad" if is_squad(config) else "glue", study=config["study"],
                    squad_file=config.get("squad_file")),
        protocol=prose(
            "finetune", "grid" if config.get("selection_seed") is None else "selection",
            rates=config["learning_rates"], seeds=config["seeds"], count=len(config["seeds"]),
            selection_seed=config.get("selection_seed"), settings=settings,
            edges=prose("finetune", "edges", edges=edges) if edges else "",
            metrics=prose("finetune", "metrics")),
        seeds=len(config["seeds"]),
        table=_table(["encoder", "step", *names, "average", "runs", "time"],
                     "lr" + "r" * len(names) + "rrr", rows),
        seed_table=_table(["encoder", "step", *(TASK_NAMES.get(t, t) for t in tasks)],
                          "lr" + "r" * len(tasks), seed_rows),
        spread=_paragraph(_seed_spread(config, table_rows)),
        random_init=_paragraph(any(row["job"]["step"] == 0 for row in table_rows)
                               and prose("finetune", "random_init")),
        majority=_paragraph(not is_squad(config) and prose("finetune", "majority")),
        ceiling=_paragraph(config.get("ceiling") and prose(
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
        table=_table(["variant", "step", "pre-training seeds", *names],
                     "lrl" + "r" * len(names), rows),
        gaps=_paragraph(gaps and prose("finetune", "spread_gaps", table=_table(
            ["pair", "step", *names], "lr" + "r" * len(names), gaps))))


# === A length study's pages ===

def masking(settings):
    """The masking rates of a pre-training study's `settings`."""
    return {k: settings.get(k, default) for k, default in (
        ("mask_rate", 0.15), ("mask_token_rate", 0.8), ("random_token_rate", 0.1))}


def length_plan(config, only_variants=None):
    """Every checkpoint the length study evaluates, with what its evaluation needs."""
    jobs = []
    for pretrain, variant, step, path in study_config.checkpoints(config, only_variants):
        settings = pretrain["settings"]
        jobs.append({"pretrain_study": pretrain["study"], "variant": variant.name,
                     "preset": variant.preset, "overrides": variant.overrides, "step": step,
                     "final": step == settings["steps"], "model": path,
                     "vocab": os.path.join(variant.run_dir, "vocab.txt"),
                     "lowercase": pretrain["vocabulary"]["lowercase"],
                     "trained_seq_len": settings["seq_len"],
                     "tokens_per_step": _tokens_per_step(pretrain),
                     "pretrain_record": records.record_dir(pretrain, variant.name),
                     "masking": masking(settings)})
    if not jobs:
        raise StudyError(f"{config['_path']}: nothing to evaluate with these filters.")
    return jobs


def length_results(config):
    """The length study's record: one (checkpoint, length) a line."""
    return os.path.join(records.record_dir(config), "results.jsonl")


def length_key(row):
    return (row["pretrain_study"], row["variant"], row["step"], row["length"])


def length_pages(config, command):
    """Writes the length study's CSV, plot, table and config record; returns their paths."""
    by_key = {length_key(row): row for row in records.read_jsonl(length_results(config))}
    jobs = length_plan(config)
    if any(length_key({**UNIGRAM, "length": n}) in by_key for n in config["lengths"]):
        jobs.append({**UNIGRAM, "trained_seq_len": None})
    results = {id(job): [by_key.get(length_key({**job, "length": n})) for n in config["lengths"]]
               for job in jobs}
    rows = [row for job in jobs for row in results[id(job)] if row]
    if not rows:
        raise StudyError(f"No result yet for study {config['study']!r}: run "
                         f"python -m experiments.run length {' '.join(config['_flag'])}")
    header = _header(config, command) + [prose(
        "length", "csv", batches=config["batches"], tokens_per_batch=config["tokens_per_batch"],
        corpus=config["valid_corpus"], seed=config["seed"])]
    columns = ("pretrain_study", "variant", "preset", "step", "trained_seq_len", "length",
               "batch_size", "batches", "masked_tokens", "loss", "accuracy", "seconds", "note")
    return _write(
        config["results_dir"], config["study"], csv=("loss.csv", columns, rows, header),
        png=("loss.png", lambda path: _length_plot(config, jobs, results, path)),
        table=("table.md", _length_table(config, jobs, results, command)),
        config=("config.json", {
            "command": command, "study_config": study_config.resolved(config),
            "evaluated": jobs, "seconds": sum(r["seconds"] for r in rows)}))


def _length_plot(config, jobs, results, path):
    lengths = config["lengths"]

    def draw(axis):
        drawn = 0
        for job in jobs:
            points = [(n, row["loss"]) for n, row in zip(lengths, results[id(job)])
                      if row and row["loss"] is not None]
            label = (f"{job['pretrain_study']}/{job['variant']}"
                     + ("" if job["final"] else f"@{job['step']}"))
            if points and job["pretrain_study"] == UNIGRAM["pretrain_study"]:
                axis.plot(*zip(*points), "--", color="black", lw=1.2, label=label)
            elif points:
                axis.plot(*zip(*points), ms=3.5, lw=1.2, label=label,
                          **records.line_style(drawn))
                drawn += 1
        axis.set_xscale("log", base=2)
        axis.set_xticks(lengths, [str(n) for n in lengths])

    trained = sorted({j["trained_seq_len"] for j in jobs} - {None})
    return _figure(draw, path, "evaluation sequence length (pre-trained at "
                   f"{', '.join(map(str, trained))})", fontsize=7)


def _length_table(config, jobs, results, command):
    lengths, rows = config["lengths"], []
    for job in jobs:
        speed = (records.median_tokens_per_second(records.read_metrics(job["pretrain_record"])[0])
                 if "pretrain_record" in job else None)
        cells, notes = [], []
        for n, row in zip(lengths, results[id(job)]):
            cells.append("–" if row is None else "n/a" if row["loss"] is None
                         else f"{row['loss']:.3f}")
            if row is not None and (row["loss"] is None or row["note"]):
                notes.append(f"{n}: {row['note']}")
        texts = {note.split(": ", 1)[1] for note in notes}
        if len(notes) == len(lengths) and len(texts) == 1:  # one note for every length
            notes = sorted(texts)
        rows.append([f"{job['pretrain_study']}/{job['variant']}", job["preset"],
                     str(job["step"]), *cells,
                     f"{job['tokens_per_step'] / speed:.2f}" if speed else "–",
                     "; ".join(notes)])
    return prose(
        "length", "length", study=config["study"], command=command,
        description=_paragraph(config.get("description")), batches=config["batches"],
        tokens=f"{config['tokens_per_batch']:,}", corpus=config["valid_corpus"],
        tokens_per_batch=config["tokens_per_batch"], seed=config["seed"],
        table=_table(["encoder", "preset", "step", *map(str, lengths), "pre-training s/step",
                      "notes"], "llr" + "r" * len(lengths) + "rl", rows)) + "\n"


# === Claims: the numbers results.md quotes that no other page prints ===

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


def first_step_below(losses, target, or_at=False):
    """The first step of `losses` (`{step: loss}`) whose loss is below `target` (`or_at`: at
    or below it); None if none."""
    return next((step for step, loss in sorted(losses.items())
                 if loss < target or or_at and loss == target), None)


def reach_final_loss(fast_folder, slow_folder, fast_step_flops=1.0, slow_step_flops=1.0):
    """When the run recorded in `fast_folder` first reaches the final validation loss of
    the run in `slow_folder`: that `step` (None if never) and its shares of the slow run's
    steps, training FLOPs (from each one's FLOPs a step) and wall time."""
    fast, fast_wall = records.read_metrics(fast_folder)
    slow, slow_wall = records.read_metrics(slow_folder)
    evaluated = validation_losses(slow)
    if not fast or not evaluated:
        raise StudyError(f"{fast_folder if not fast else slow_folder} has no logged "
                         "evaluation in its metrics.csv: nothing to compare.")
    slow_steps = max(evaluated)
    slow_final = evaluated[slow_steps]
    step = first_step_below(validation_losses(fast), slow_final, or_at=True)
    result = {"slow_steps": slow_steps, "slow_final": slow_final, "step": step,
              "step_share": None, "flop_share": None, "time_share": None}
    if step is not None:
        result.update(step_share=step / slow_steps,
                      flop_share=step * fast_step_flops / (slow_steps * slow_step_flops),
                      time_share=step * (fast_wall / fast[-1]["step"]) / slow_wall)
    return result


def t2_rows(group_configs):
    """`reach_final_loss` of `T2_FAST` against `T2_SLOW`, one row a seed of a seed group (a
    study and its replicates), each row also naming its `study` and `seed`."""
    from benchmarks import encoders

    fast, slow, rows = T2_FAST, T2_SLOW, []
    for config in group_configs:
        runs = {run["variant"].name: run for run in read_runs(config)}
        missing = [name for name in (fast, slow) if not (name in runs and runs[name]["record"])]
        if missing:
            raise StudyError(f"{config['study']} has no record of {missing}: pre-train it first.")
        flops, (batch, length) = {}, (config["settings"][k] for k in ("batch_size", "seq_len"))
        for variant in (runs[fast]["variant"], runs[slow]["variant"]):
            if variant.overrides:  # a training step's FLOPs, as benchmarks.encoders counts them
                raise StudyError(f"{variant.name} changes {sorted(variant.overrides)} of its "
                                 "preset; benchmarks.encoders counts the FLOPs of library "
                                 "presets only.")
            flops[variant.name] = encoders.variant_flops_per_token(
                variant.variant, config["size"], length, batch) * batch * length
        rows.append({"study": config["study"], "seed": config["settings"]["seed"],
                     "flop_ratio": flops[fast] / flops[slow],
                     **reach_final_loss(runs[fast]["folder"], runs[slow]["folder"],
                                        flops[fast], flops[slow])})
    return rows


def t2_table(rows):
    """The rows of `t2_rows` as a Markdown table."""
    return prose("claims", "t2", fast=T2_FAST, slow=T2_SLOW, rows=_lines(
        [row["study"], str(row["seed"]), f"{row['slow_final']:.3f} ({row['slow_steps']:,})",
         "never" if row["step"] is None else f"{row['step']:,}",
         *(_cell(row[k], ".2%") for k in ("step_share", "flop_share", "time_share"))]
        for row in rows),
        ratios=" / ".join(sorted({f"{row['flop_ratio']:.4f}" for row in rows})))


def plateau_rows(results_dir, runs=PLATEAU_RUNS):
    """One row a recorded run of `runs`: its status, last step, first step below
    `PLATEAU_LOSS` and losses at steps 1,000 and 2,000."""
    rows = []
    for label, study, variant in runs:
        folder = os.path.join(results_dir, "records", study, variant)
        record = records.read_json(os.path.join(folder, records.RUN_RECORD))
        logged, _ = records.read_metrics(folder)
        if record is None or not logged:
            continue
        losses = validation_losses(logged)
        rows.append({"label": label, "study": study, "variant": variant,
                     "status": record["status"], "last_step": logged[-1]["step"],
                     "below": first_step_below(losses, PLATEAU_LOSS),
                     "at_1000": losses.get(1000), "at_2000": losses.get(2000),
                     "curve": sorted(losses.items())})
    return rows


def plateau_page(rows, results_dir):
    """Writes `plateau_control.md` and `.png` into `results_dir`; returns their paths."""
    def below(row):
        if row["below"] is not None:
            return f"{row['below']:,}"
        return "never" if row["last_step"] >= 2000 else f"not by {row['last_step']:,}"

    page = records.write_text(os.path.join(results_dir, f"{PLATEAU_PAGE}.md"), prose(
        "claims", "plateau", loss=PLATEAU_LOSS, rows=_lines(
            [row["label"], row["study"], row["status"], below(row), _cell(row["at_1000"]),
             _cell(row["at_2000"])] for row in rows)) + "\n")

    def draw(axis):
        for index, row in enumerate(rows):
            style = records.line_style(index)
            if "old init." in row["label"]:
                style.update(linestyle=":")
            axis.plot(*zip(*row["curve"]), ms=2.5, lw=1.3, label=row["label"], **style)
        axis.axhline(PLATEAU_LOSS, color="grey", lw=0.8, linestyle="--")

    return page, _figure(draw, os.path.join(results_dir, f"{PLATEAU_PAGE}.png"),
                         "pre-training step (x 4,096 tokens)",
                         f"Pre-LN against post-LN: who leaves the plateau (dashed: {PLATEAU_LOSS})")


def band_position(results_dir, run=PIPELINE_RUN, band=PIPELINE_BAND, from_step=PIPELINE_FROM):
    """Where the validation loss of `run` (`(study, variant)`) lies against the band of
    the runs of `band` at the evaluations all logged: how often above and below it and, from
    `from_step` on, how often above the band's mean and by how much."""
    def curve(study, variant):
        return validation_losses(records.read_metrics(
            os.path.join(results_dir, "records", study, variant))[0])

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


def claims(argv=None):
    """`python -m experiments.claims`: prints T2's table and the two pipelines, writes the
    plateau page."""
    parser = argparse.ArgumentParser(prog="python -m experiments.claims",
                                     description=prose("claims", "help") + "\n",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="where the plateau page goes (default: the results "
                                      "folder of the records, docs/results)")
    args = parser.parse_args(argv)
    replicate_configs = [study_config.load_config(name) for name in T2_REPLICATES]
    (group_configs, _), = seed_groups(replicate_configs).values()
    print(t2_table(t2_rows(group_configs)))
    results_dir = replicate_configs[0]["results_dir"]
    band = band_position(results_dir)
    late = band["late"] and "\n" + prose(
        "claims", "band_late", from_step=f"{PIPELINE_FROM:,}", **{
            k: f"{band[k]:+.3f}" if k.startswith("late_m") else band[k]
            for k in ("late", "late_above_mean", "late_mean", "late_min", "late_max")})
    print("\n" + prose("claims", "band", **{
        **band, "run": "/".join(PIPELINE_RUN), "late": late or "",
        "members": ", ".join("/".join(member) for member in PIPELINE_BAND)}) + "\n")
    for path in plateau_page(plateau_rows(results_dir), args.out or results_dir):
        print(f"wrote {path}")
    return 0


# === Every page ===

def report_command(config):
    """The command that regenerates a study's pages, whichever command wrote them."""
    return records.command_line(["report", *config["_flag"]])


def report(reference=None):
    """Writes the pages of the study `reference` (a name or a `.json` file; default: every
    recorded study, and the maps) and the pages it is part of; returns `{what: path}`."""
    if reference and reference.endswith(".json"):  # a study in a file, among its folder's
        names = sorted(glob.glob(os.path.join(os.path.dirname(reference), "*.json")))
    else:
        names = sorted(study_config.studies())
    every = [study_config.load_config(name) for name in names]
    named = [c for c in every if reference in (c["study"], c["_path"])] if reference else every
    if reference and not named:  # not among them (or nowhere: load_config says so)
        named = [study_config.load_config(reference)]

    def recorded(config):  # a fine-tuning study that has only pinned its settings: not yet
        folder = records.record_dir(config)
        return any(glob.glob(os.path.join(folder, "**", name), recursive=True)
                   for name in (records.RUN_RECORD, "results.jsonl", SUMMARY_FILE))

    paths, writers = {}, {"pretrain": pretrain_pages, "finetune": finetune_pages,
                          "length": length_pages}

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

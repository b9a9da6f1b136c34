"""A pre-training study's pages, its seed replicates' and its comparisons', from the committed
records alone: `pretrain_pages` (a study: loss CSV, plot, pairs, table, config record),
`seed_pages` (a study and the replicates that name it in `references`), `group_figure`
(seed groups in one figure) and `compare_pages` (studies that differ only in their
settings). Which groups and comparisons there are is data: entries of `studies.json`.
"""

import itertools
import json
import os
import statistics

from experiments import config as study_config
from experiments import records
from experiments.config import StudyError
from experiments.pages import (LOSS_LABEL, cell, loss_figure, markdown_table, page_header,
                               paragraph, prose, table_lines, write_pages)
from experiments.plans import tokens_per_step

# Fractions of the budget: the columns of a study's table (each saved checkpoint's own
# fraction is added) and of a seed page.
FRACTIONS = (0.25, 0.5, 1.0)
SEED_FRACTIONS = (0.3, 0.5, 1.0)
# Fields of `run_config.json` that may differ between the runs of a study.
FREE_FIELDS = ("preset", "out", "backbone_overrides")


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
    vocabulary, header = started[0]["record"]["vocabulary"], page_header(config, command)
    rows = [{"variant": run["variant"].name, "preset": run["variant"].preset,
             "tokens": row["step"] * tokens_per_step(config), **row}
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
    return write_pages(
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

    return loss_figure(draw, path, f"pre-training step (× {tokens_per_step(config):,} tokens)",
                       f"{config['study']}: {config['size']} encoders, identical data and "
                       "settings")


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
                      *(cell(by_step.get(s, {}).get("val_loss")) for s in columns.values()),
                      cell(by_step.get(columns[1.0], {}).get("val_accuracy")),
                      records.format_seconds(run["wall_seconds"]) if run["rows"] else "–",
                      cell(records.median_tokens_per_second(run["rows"]), ",.0f"), status])
    table = markdown_table(["variant", "preset", *(f"{round(f * 100)}% (step {s})" for f, s in
                                                   columns.items()),
                            "val. accuracy (100%)", "wall time", "tokens/s", "status"],
                           "ll" + "r" * len(columns) + "rrrl", cells)
    return prose(
        "pretrain", "table", study=config["study"], flags=" ".join(config["_flag"]),
        command=command, description=paragraph(config.get("description")),
        size=config["size"], steps=f"{settings['steps']:,}", batch_size=settings["batch_size"],
        seq_len=settings["seq_len"], tokens=f"{settings['steps'] * tokens_per_step(config):,}",
        learning_rate=f"{settings['learning_rate']:g}", seed=settings["seed"],
        sha256=vocabulary["sha256"][:16], valid_batches=settings.get("valid_batches", 50),
        eval_every=settings.get("eval_every", 1000), table=table,
        machines=_machines(run for run, _, _ in rows),
        references=paragraph(references and prose("pretrain", "references"))) + "\n"


# === Seed replicates: a study and the studies that differ from it only in the seed ===

SEED_COLUMNS = ("variant", "step", "tokens", "seeds", "mean", "lowest", "highest", "by_seed")
# What seed groups drawn in one figure (a `compare_seeds` entry of `studies.json`) may differ
# in: the initialization and the input, which is what they compare.
GROUP_FREE_SETTINGS = ("seed", "corpus", "valid_corpus", "shards", "valid_shards")


def seed_groups(configs):
    """`{study: ([its config, its replicates' configs...], the variants they name)}`: a
    replicate names the study it repeats in `references` and has another seed."""
    groups = {}
    for config in configs:
        for file, names in config.get("references", {}).items():
            other = _referenced(config, file)
            if other["settings"]["seed"] == config["settings"]["seed"]:
                continue  # runs drawn beside the study's own, not a replicate of them
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
    rows = [{"variant": v, "step": step, "tokens": step * tokens_per_step(configs[0]), **s}
            for v in variants for step, s in summaries[v].items()]
    header = [f"command: {command}", "studies (seed): " + "; ".join(
        f"{c['study']} ({c['settings']['seed']})" for c in configs)]
    return write_pages(
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

    table = markdown_table(
        ["variant", *(f"{f:.0%} (step {at[f]:,})" for f in SEED_FRACTIONS), "seeds"],
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
        gaps="".join(paragraph(prose("pretrain", section, rows=table_lines(
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
            tokens = [step * tokens_per_step(config) / 1e6 for step, _ in points]
            style = records.line_style(i)
            seeds = points[0][1]["seeds"] if points else 0
            axis.plot(tokens, [s["mean"] for _, s in points], ms=3, lw=1.4, markevery=max(
                1, len(points) // 12), **style,
                label=f"{v} (mean of {seeds} seeds)" if seeds > 1 else f"{v} (one seed)")
            if seeds > 1:
                axis.fill_between(tokens, [s["lowest"] for _, s in points],
                                  [s["highest"] for _, s in points], color=style["color"],
                                  alpha=0.2, lw=0, label=f"{v}: lowest to highest seed")

    return loss_figure(draw, path, "pre-training tokens (millions)",
                       f"{studies}: seeds as bands", tight=True, size=(7.5, 4.5))


# === Comparisons: studies that differ only in their overrides ===

COMPARE_COLUMNS = ("study", "overrides", "variant", "step", "val_loss", "val_accuracy", "loss",
                   "tokens_per_second", "elapsed_seconds")
# Settings that may differ between the compared studies: what they vary, and the seed.
FREE_SETTINGS = (*study_config.OVERRIDABLE_FIELDS, "seed")


def _describe(config, run=None, runs=None):
    """What the study changes of the study it extends when that is only speed or tuning
    settings (`OVERRIDABLE_FIELDS`, the seed aside), and the run's initialization where the
    compared `runs` differ in it (their records name it)."""
    own = {k: v for k, v in config.get("_own_settings", {}).items() if k != "seed"}
    text = ", ".join(f"{k}={v}" for k, v in own.items()
                     if set(own) <= set(study_config.OVERRIDABLE_FIELDS))
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
    return write_pages(
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
                         f"{run['rows'][-1]['step']:,}", cell(speed, ",.0f"),
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
        rows=table_lines(rows), shared=paragraph(choice), machines=_machines(runs.values()),
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

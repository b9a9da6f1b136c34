"""Pre-training studies that differ only in their seed: the seed spread, as bands.

A replicate (a study with `"seed": N` and a `base`) trains the same variants on the same
data with the same settings as the study it names in `references`; only the random
initialization, masking and data order change. `report` puts each study together with
its replicates (`seed_groups`, e.g. `long` and `long_seed1`, over the variants they
name) and writes into the results folder `<name>_seeds.csv` (per variant and logged
step: the validation loss of every seed, their mean, lowest and highest),
`<name>_seeds.png` (TUPE Figure 4a at small scale: the mean validation loss against
steps, one colour a variant, the band between the lowest and highest seed around it) and
`<name>_seeds.md`: per variant the loss at 30%, 50% and 100% of the budget (mean and seed
range); per pair of variants the gap between their means against the spread across
seeds; and each variant at 30% and 50% against the others at 100% (TUPE's claim that
TUPE at 30% of the steps matches BERT at 100%).
"""

import itertools
import json
import os
import statistics

from experiments import config as study_config
from experiments import pretrain_study, records
from experiments.config import StudyError

FRACTIONS = (0.3, 0.5, 1.0)
COLUMNS = ("variant", "step", "tokens", "seeds", "mean", "lowest", "highest", "by_seed")


def seed_groups(configs):
    """`{study: ([its config, its replicates' configs...], the variants they name)}`."""
    groups = {}
    for config in configs:
        if "seed" not in config:
            continue
        for file, names in config.get("references", {}).items():
            other = study_config.load_config(study_config.locate(file, config["_dir"]),
                                             kind="pretrain")
            members, variants = groups.setdefault(other["study"], ([other], []))
            members.append(config)
            variants += [name for name in names if name not in variants]
    return groups


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


def _seed_curves(configs, only=None):
    """`{variant: {seed: {step: val_loss}}}` of the studies' records."""
    curves = {}
    for config in configs:
        for run in pretrain_study.read_runs(config):
            variant = run["variant"].name
            losses = pretrain_study.validation_losses(run)
            if losses and (not only or variant in only):
                curves.setdefault(variant, {})[config["settings"]["seed"]] = losses
    return curves


def compare_groups(groups, name, out_dir=None):
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
    return {"png": _plot([label for label, _ in series], dict(series), groups[0][1], path,
                         title=" vs ".join(configs[0]["study"] for _, configs, _ in groups)
                         + ": seeds as bands")}


def replicates(configs, name, command, only=None):
    """Writes the seed comparison's CSV, plot and table; returns their paths."""
    _check_replicates(configs)
    curves = _seed_curves(configs, only)  # variant -> {seed: {step: val_loss}}
    order = [v.name for v in study_config.variants(configs[0])]
    variants = sorted(curves, key=lambda v: order.index(v) if v in order else len(order))
    if not variants:
        raise StudyError(f"None of the studies {[c['study'] for c in configs]} has logged a "
                         "step yet: pre-train them first.")
    settings = configs[0]["settings"]
    tokens_per_step = settings["batch_size"] * settings["seq_len"]
    summaries = {v: _summarize(curves[v]) for v in variants}
    rows = [{"variant": v, "step": step, "tokens": step * tokens_per_step,
             **{k: s[k] for k in ("seeds", "mean", "lowest", "highest")},
             "by_seed": json.dumps(s["by_seed_values"])}
            for v in variants for step, s in summaries[v].items()]
    out_dir = configs[0]["results_dir"]
    header = [f"command: {command}", "studies (seed): " + "; ".join(
        f"{c['study']} ({c['settings']['seed']})" for c in configs)]
    paths = {"csv": records.write_csv(os.path.join(out_dir, f"{name}_seeds.csv"), COLUMNS,
                                      rows, header)}
    paths["png"] = _plot(variants, summaries, configs,
                         os.path.join(out_dir, f"{name}_seeds.png"))
    paths["table"] = records.write_text(os.path.join(out_dir, f"{name}_seeds.md"),
                                        _table(configs, variants, curves, summaries, name,
                                               command))
    return paths


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


def _table(configs, variants, curves, summaries, name, command):
    first = configs[0]
    settings = first["settings"]
    # The evaluation step of each fraction, logged or not yet: a cell or gap at a step some
    # seed has not reached stays empty.
    at = {f: pretrain_study.evaluation_step(first, f) for f in FRACTIONS}
    seeds = ", ".join(f"`{c['study']}` (seed {c['settings']['seed']})" for c in configs)
    lines = [f"# Seed replicates: `{name}`", "", f"This table, the CSV and the plot: `{command}`",
             "", (f"`{first['size']}` encoders, {settings['steps']:,} steps of "
                  f"{settings['batch_size']} × {settings['seq_len']} tokens; the studies "
                  f"{seeds} differ only in the seed (checked). A cell is the mean validation "
                  "loss over the seeds, with the lowest and highest seed in parentheses."), ""]
    lines += ["| variant | " + " | ".join(f"{f:.0%} (step {at[f]:,})" for f in FRACTIONS)
              + " | seeds |", "| --- | " + " | ".join("---:" for _ in FRACTIONS) + " | ---: |"]
    for v in variants:
        lines.append(f"| {v} | " + " | ".join(_cell(summaries[v], at[f]) for f in FRACTIONS)
                     + f" | {len(curves[v])} |")
    if len(variants) > 1:
        lines += ["", "**Gaps between variants** at the same step: the difference of the mean "
                      "losses, and the difference seed by seed (seed k of one variant against "
                      "seed k of the other). *Beyond the seed spread*: every seed's difference "
                      "has the same sign and the mean gap is larger than the widest seed range "
                      "of either variant at that step. A step that not every seed of both "
                      "has logged yet: –.", "",
                  "| pair | step | mean gap | seed by seed | beyond the seed spread |",
                  "| --- | ---: | ---: | --- | --- |"]
        for a, b in itertools.combinations(variants, 2):
            for f in FRACTIONS:
                lines.append(_gap_row(curves, summaries, a, at[f], b, at[f],
                                      f"{a} − {b}", f"{at[f]:,}"))
        lines += ["", "**Early against final** (TUPE's claim: TUPE at 30% of the steps "
                      "reaches BERT's final loss): each variant at 30% and 50% of the budget "
                      "against every other variant at 100%. A negative gap: the early "
                      "checkpoint is already lower.", "",
                  "| pair | steps | mean gap | seed by seed | beyond the seed spread |",
                  "| --- | ---: | ---: | --- | --- |"]
        for a, b in itertools.permutations(variants, 2):
            for f in FRACTIONS[:-1]:
                lines.append(_gap_row(curves, summaries, a, at[f], b, at[1.0],
                                      f"{a} at {f:.0%} − {b} at 100%",
                                      f"{at[f]:,} vs {at[1.0]:,}"))
    lines += ["", "Validation: the same batches of the validation text for every run and step "
                  "(`valid_batches` × `batch_size` sequences, masked with seed + 1 of each "
                  "study: the masks differ between seeds, the text does not).", ""]
    return "\n".join(lines)


def beyond_seed_spread(diffs, spread):
    """Whether seed-by-seed differences decide a gap: every one has the same sign and their
    mean is larger than `spread` (the widest range across seeds of either side)."""
    return len({d > 0 for d in diffs}) == 1 and abs(statistics.fmean(diffs)) > spread


def _gap_row(curves, summaries, a, step_a, b, step_b, label, steps):
    mean, diffs = _gap(curves, a, step_a, b, step_b)
    # Judged only where every seed of both sides has logged the step (the spread is theirs).
    if mean is None or step_a not in summaries[a] or step_b not in summaries[b]:
        return f"| {label} | {steps} | – | – | – |"
    ranges = [summaries[a][step_a]["highest"] - summaries[a][step_a]["lowest"],
              summaries[b][step_b]["highest"] - summaries[b][step_b]["lowest"]]
    beyond = len(diffs) > 1 and beyond_seed_spread(diffs, max(ranges))
    verdict = ("yes" if beyond else "no") if len(diffs) > 1 else "one seed"
    return (f"| {label} | {steps} | {mean:+.3f} | "
            + ", ".join(f"{d:+.3f}" for d in diffs) + f" | {verdict} |")


def _plot(variants, summaries, configs, path, title=None):
    settings = configs[0]["settings"]
    tokens_per_step = settings["batch_size"] * settings["seq_len"]
    figure, axis = records.pyplot().subplots(figsize=(7.5, 4.5))
    for i, v in enumerate(variants):
        points = sorted(summaries[v].items())
        steps = [step for step, _ in points]
        tokens = [step * tokens_per_step / 1e6 for step in steps]
        style = records.line_style(i)
        seeds = points[0][1]["seeds"] if points else 0
        axis.plot(tokens, [s["mean"] for _, s in points], ms=3, lw=1.4, markevery=max(
            1, len(points) // 12), **style,
            label=f"{v} (mean of {seeds} seeds)" if seeds > 1 else f"{v} (one seed)")
        if seeds > 1:
            axis.fill_between(tokens, [s["lowest"] for _, s in points],
                              [s["highest"] for _, s in points], color=style["color"],
                              alpha=0.2, lw=0, label=f"{v}: lowest to highest seed")
    axis.set_xlabel("pre-training tokens (millions)")
    axis.set_ylabel("validation masked-LM loss")
    axis.set_title(title or ", ".join(c["study"] for c in configs) + ": seeds as bands",
                   fontsize=10)
    axis.grid(alpha=0.3)
    figure.tight_layout()
    records.legend_outside(axis)
    return records.save_figure(figure, path)

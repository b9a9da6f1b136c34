"""Several pre-training studies side by side: the speed study and the tuning sweep.

Studies that share a base and differ only in their `overrides` (precision and XLA for the
speed study, learning rate and warm-up for the sweep; see
`experiments.config.OVERRIDABLE_FIELDS`) are compared run by run. `report` compares the
studies of each entry of `COMPARISONS` (the first is the reference) and writes into the
results folder `<name>_compare.csv` (every logged evaluation of every run),
`<name>_compare.png` (validation loss against steps, one panel a variant, one colour a
study) and `<name>_compare.md`: per study and variant the median tokens/s, its ratio to
the first study's (measured in the same sitting when the runs were), the validation loss
at the last step every compared run reached, its largest difference from the first
study's curve, and the range and mean of that difference over the second half of the
evaluations both logged (past the warm-up and the plateau); and per variant the study with
the lowest loss there (the sweep's choice).
"""

import os

from experiments import config as study_config
from experiments import pretrain_study, records
from experiments.config import StudyError

COLUMNS = ("study", "overrides", "variant", "step", "val_loss", "val_accuracy", "loss",
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


def check_comparable(configs):
    """Raises `StudyError` unless the studies differ only in `FREE_SETTINGS`."""
    study_config.require_alike(configs, FREE_SETTINGS, f"only studies that differ in "
                               f"{list(FREE_SETTINGS)} can be compared (give them one base).")


def compare(configs, name, command):
    """Writes the comparison's CSV, plot and table; returns their paths."""
    if len(configs) < 2:
        raise StudyError(f"comparison {name!r} needs at least two studies.")
    studies = [c["study"] for c in configs]
    if len(set(studies)) != len(studies):
        raise StudyError(f"comparison {name!r} names a study twice: {studies}")
    check_comparable(configs)
    runs = {}  # (study, variant) -> run
    for config in configs:
        for run in pretrain_study.read_runs(config):
            if run["rows"]:
                runs[config["study"], run["variant"].name] = run
    order = [r.name for c in configs for r in study_config.variants(c)]  # first study first
    variants = sorted({v for _, v in runs}, key=order.index)
    if not variants:
        raise StudyError(f"None of the studies {studies} has logged a step yet: pre-train "
                         "them first.")
    out_dir = configs[0]["results_dir"]
    header = [f"command: {command}",
              "studies: " + "; ".join(f"{c['study']} ({_describe(c)})" for c in configs)]
    rows = [{"study": study, "overrides": _describe(config), "variant": variant, **row}
            for config in configs for study in [config["study"]] for variant in variants
            for row in runs.get((study, variant), {"rows": []})["rows"]]
    paths = {"csv": records.write_csv(os.path.join(out_dir, f"{name}_compare.csv"), COLUMNS,
                                      rows, header)}
    paths["png"] = _plot(configs, variants, runs, os.path.join(out_dir, f"{name}_compare.png"))
    paths["table"] = records.write_text(os.path.join(out_dir, f"{name}_compare.md"),
                                        _table(configs, variants, runs, name, command))
    return paths


def _table(configs, variants, runs, name, command):
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
        curves = {c["study"]: pretrain_study.validation_losses(runs[c["study"], variant])
                  for c in present}
        common = set.intersection(*(set(curve) for curve in curves.values()))
        step = max(common) if common else None
        base_run = runs.get((first["study"], variant))
        base_speed = base_run and records.median_tokens_per_second(base_run["rows"])
        for config in present:
            run = runs[config["study"], variant]
            curve = curves[config["study"]]
            speed = records.median_tokens_per_second(run["rows"])
            ratio = (f"{speed / base_speed:.2f}x" if speed and base_speed else "–")
            if base_run is not None and config is not first:
                base_curve = curves[first["study"]]
                shared = sorted(set(curve) & set(base_curve))
                diffs = [curve[s] - base_curve[s] for s in shared]
                largest = (f"{max(diffs, key=abs):+.3f} ({len(shared)} evaluations)"
                           if diffs else "–")
                late = _second_half(shared, diffs)
            else:
                largest, late = "–", "–"
            loss = curve.get(step) if step is not None else None
            if loss is not None:
                at_common.setdefault(variant, {})[config["study"]] = loss
            if loss is not None and (variant not in best or loss < best[variant][1]):
                best[variant] = (config["study"], loss, step)
            last = run["rows"][-1]["step"]
            lines.append(
                f"| {variant} | {config['study']} | {_describe_run(config, run, runs)} | "
                f"{last:,} | "
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
    machines = sorted({run["record"]["versions"]["machine"] for run in runs.values()})
    lines += ["", "Tokens/s: median over the run's logged blocks of `eval_every` steps "
                  "(validation and, in the first block, compilation included). Machine: "
              + "; ".join(machines) + ".", ""]
    return "\n".join(lines)


def _second_half(steps, diffs):
    """The range and mean of `diffs` (at the sorted `steps`) from half the last step on."""
    late = [d for s, d in zip(steps, diffs) if 2 * s >= steps[-1]] if steps else []
    if not late:
        return "–"
    return (f"{min(late):+.3f} to {max(late):+.3f} ({sum(late) / len(late):+.3f}; steps "
            f"{next(s for s in steps if 2 * s >= steps[-1]):,}–{steps[-1]:,}, {len(late)} "
            "evaluations)")


def _plot(configs, variants, runs, path):
    figure, axes = records.pyplot().subplots(
        1, len(variants), figsize=(4.2 * len(variants) + 2.6, 4), squeeze=False, sharey=True)
    for axis, variant in zip(axes[0], variants):
        for i, config in enumerate(configs):
            run = runs.get((config["study"], variant))
            if run is None:
                continue
            points = sorted(pretrain_study.validation_losses(run).items())
            axis.plot(*zip(*points), ms=3.5, lw=1.4, **records.line_style(i),
                      label=f"{config['study']} ({_describe_run(config, run, runs)})")
        axis.set_title(variant, fontsize=10)
        axis.set_xlabel("pre-training step")
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("validation masked-LM loss")
    handles, labels = axes[0][0].get_legend_handles_labels()
    for axis in axes[0][1:]:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    figure.tight_layout()
    records.legend_outside(axes[0][-1], handles, labels)
    return records.save_figure(figure, path)

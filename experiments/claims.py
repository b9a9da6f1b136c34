"""`python -m experiments.claims [--out DIR]`: the numbers `docs/results.md` quotes for the
papers' claims that no other page prints, from the committed records alone: T2 in loss (the
step at which TUPE-A reaches BERT-A's final loss, seed by seed), the two pipelines (the CPU
run against the GPU seeds' band) and the plateau control (a page and its figure). Which runs
each reads is the `claims` entry of `studies.json`.
"""

import argparse
import os
import statistics

from experiments import config as study_config
from experiments import records
from experiments.config import StudyError
from experiments.pages import cell, loss_figure, prose, table_lines
from experiments.report_pretraining import read_runs, seed_groups, validation_losses
from keras_tupe_base.flops import variant_flops_per_token

# The entry of `studies.json` that names the claims' runs.
ENTRY = "claims"


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


def t2_rows(group_configs, fast, slow):
    """`reach_final_loss` of the variant `fast` against `slow`, one row a seed of a seed group
    (a study and its replicates), each row also naming its `study` and `seed`."""
    rows = []
    for config in group_configs:
        runs = {run["variant"].name: run for run in read_runs(config)}
        missing = [name for name in (fast, slow) if not (name in runs and runs[name]["record"])]
        if missing:
            raise StudyError(f"{config['study']} has no record of {missing}: pre-train it first.")
        flops, (batch, length) = {}, (config["settings"][k] for k in ("batch_size", "seq_len"))
        for variant in (runs[fast]["variant"], runs[slow]["variant"]):
            if variant.overrides:  # a preset's training step, as keras_tupe_base.flops counts it
                raise StudyError(f"{variant.name} changes {sorted(variant.overrides)} of its "
                                 "preset; keras_tupe_base.flops counts the FLOPs of library "
                                 "presets only.")
            flops[variant.name] = variant_flops_per_token(
                variant.variant, config["size"], length, batch) * batch * length
        rows.append({"study": config["study"], "seed": config["settings"]["seed"],
                     "flop_ratio": flops[fast] / flops[slow],
                     **reach_final_loss(runs[fast]["folder"], runs[slow]["folder"],
                                        flops[fast], flops[slow])})
    return rows


def t2_table(rows, fast, slow):
    """The rows of `t2_rows` as a Markdown table."""
    return prose("claims", "t2", fast=fast, slow=slow, rows=table_lines(
        [row["study"], str(row["seed"]), f"{row['slow_final']:.3f} ({row['slow_steps']:,})",
         "never" if row["step"] is None else f"{row['step']:,}",
         *(cell(row[k], ".2%") for k in ("step_share", "flop_share", "time_share"))]
        for row in rows),
        ratios=" / ".join(sorted({f"{row['flop_ratio']:.4f}" for row in rows})))


def plateau_rows(results_dir, runs, loss):
    """One row a recorded run of `runs` (`(label, study, variant)`): its status, last step,
    first step below `loss` and losses at steps 1,000 and 2,000."""
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
                     "below": first_step_below(losses, loss),
                     "at_1000": losses.get(1000), "at_2000": losses.get(2000),
                     "curve": sorted(losses.items())})
    return rows


def plateau_page(rows, results_dir, loss, name):
    """Writes `<name>.md` and `.png` (the runs of `plateau_rows` against the line at `loss`)
    into `results_dir`; returns their paths."""
    def below(row):
        if row["below"] is not None:
            return f"{row['below']:,}"
        return "never" if row["last_step"] >= 2000 else f"not by {row['last_step']:,}"

    page = records.write_text(os.path.join(results_dir, f"{name}.md"), prose(
        "claims", "plateau", loss=loss, rows=table_lines(
            [row["label"], row["study"], row["status"], below(row), cell(row["at_1000"]),
             cell(row["at_2000"])] for row in rows)) + "\n")

    def draw(axis):
        for index, row in enumerate(rows):
            style = records.line_style(index)
            if "old init." in row["label"]:
                style.update(linestyle=":")
            axis.plot(*zip(*row["curve"]), ms=2.5, lw=1.3, label=row["label"], **style)
        axis.axhline(loss, color="grey", lw=0.8, linestyle="--")

    return page, loss_figure(draw, os.path.join(results_dir, f"{name}.png"),
                             "pre-training step (x 4,096 tokens)",
                             f"Pre-LN against post-LN: who leaves the plateau (dashed: {loss})")


def band_position(results_dir, run, band, from_step):
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


def main(argv=None):
    """`python -m experiments.claims`: prints T2's table and the two pipelines, writes the
    plateau page, as the `claims` entry of `studies.json` names them."""
    parser = argparse.ArgumentParser(prog="python -m experiments.claims",
                                     description=prose("claims", "help") + "\n",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="where the plateau page goes (default: the results "
                                      "folder of the records, docs/results)")
    args = parser.parse_args(argv)
    entry = study_config.load_config(ENTRY, kind="claims")
    t2, plateau, pipelines = entry["t2"], entry["plateau"], entry["pipelines"]
    replicate_configs = [study_config.load_config(name) for name in t2["replicates"]]
    (group_configs, _), = seed_groups(replicate_configs).values()
    print(t2_table(t2_rows(group_configs, t2["fast"], t2["slow"]), t2["fast"], t2["slow"]))
    results_dir = replicate_configs[0]["results_dir"]
    band = band_position(results_dir, pipelines["run"], pipelines["band"],
                         pipelines["from_step"])
    late = band["late"] and "\n" + prose(
        "claims", "band_late", from_step=f"{pipelines['from_step']:,}", **{
            k: f"{band[k]:+.3f}" if k.startswith("late_m") else band[k]
            for k in ("late", "late_above_mean", "late_mean", "late_min", "late_max")})
    print("\n" + prose("claims", "band", **{
        **band, "run": "/".join(pipelines["run"]), "late": late or "",
        "members": ", ".join("/".join(member) for member in pipelines["band"])}) + "\n")
    for path in plateau_page(plateau_rows(results_dir, plateau["runs"], plateau["loss"]),
                             args.out or results_dir, plateau["loss"], plateau["page"]):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

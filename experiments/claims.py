"""Numbers `docs/results.md` quotes for the papers' claims that no report page prints.

    python -m experiments.claims

T2 (TUPE Table 2: TUPE-A at 30% of the pre-training steps matches BERT-A at 100%), read in
masked-LM loss on the long runs (`long_v2_jax` and its seed replicates): for each seed, the
first evaluation at which TUPE-A's validation loss is at or below the final validation loss
of the BERT-A run of the same seed (same data order and masks), as a step, as a share of
BERT-A's steps, as a share of BERT-A's training FLOPs (a TUPE-A step costs more:
`benchmarks.encoders.variant_flops_per_token`), and as a share of BERT-A's measured wall
time. Like every report, it reads the committed records alone.

The plateau control (issue 48 item 3): at the swept setting (peak LR 1e-3, 20% warm-up,
2,000 steps), does a pre-LN BERT-A get below the unigram plateau (`PLATEAU_LOSS`) as TUPE-A
does and post-LN BERT-A does not? For each run of `PLATEAU_RUNS` with a record: its first
evaluation below `PLATEAU_LOSS`, and its loss at steps 1,000 and 2,000; written with its figure
to `docs/results/plateau_control.{md,png}`.
"""

import argparse
import os

from benchmarks import encoders
from experiments import config as study_config
from experiments import pretrain_study, records, replicates
from experiments.config import StudyError

# The long runs on the corrected initialization: the base study's seed replicates, whose
# `references` name the base (`replicates.seed_groups` puts the three together).
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
        runs = {run["variant"].name: run for run in pretrain_study.read_runs(config)}
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
        record = records.read_json(os.path.join(folder, pretrain_study.RECORD))
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
    def value(number):
        return "–" if number is None else f"{number:.3f}"

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
                     f"{value(row['at_1000'])} | {value(row['at_2000'])} |")
    page = records.write_text(os.path.join(results_dir, f"{PLATEAU_PAGE}.md"),
                              "\n".join(lines) + "\n")
    figure, axis = records.pyplot().subplots(figsize=(7, 4.5))
    for index, row in enumerate(rows):
        style = records.line_style(index)
        if "old init." in row["label"]:
            style.update(linestyle=":")
        axis.plot(*zip(*row["curve"]), ms=2.5, lw=1.3, label=row["label"], **style)
    axis.axhline(loss, color="grey", lw=0.8, linestyle="--")
    axis.set_xlabel("pre-training step (x 4,096 tokens)")
    axis.set_ylabel("validation masked-LM loss")
    axis.set_title(f"Pre-LN against post-LN: who leaves the plateau (dashed: {loss})",
                   fontsize=10)
    axis.grid(alpha=0.3)
    records.legend_outside(axis)
    return page, records.save_figure(figure, os.path.join(results_dir, f"{PLATEAU_PAGE}.png"))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.claims", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="where the plateau page goes (default: the results "
                                      "folder of the records, docs/results)")
    args = parser.parse_args(argv)
    replicate_configs = [study_config.load_config(name) for name in T2_REPLICATES]
    (group_configs, _), = replicates.seed_groups(replicate_configs).values()
    print(t2_table(t2_rows(group_configs)))
    results_dir = replicate_configs[0]["results_dir"]
    for path in plateau_page(plateau_rows(results_dir), args.out or results_dir):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

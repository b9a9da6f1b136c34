"""Plot the losses of one or more pre-training runs (their `metrics.csv`).

    keras-tupe-plot-metrics runs/tupe_r_mini_enwiki --out docs/results/loss.png
"""

import csv
import os
import sys

# matplotlib (optional) is imported inside the function, after the flags parse.
from keras_tupe_cli.common import command_parser, entry_point


def read_metrics(run_dir):
    path = os.path.join(run_dir, "metrics.csv")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} a pre-training run?")
    with open(path) as f:
        return list(csv.DictReader(f))


@entry_point()
def main(argv=None):
    parser = command_parser("keras-tupe-plot-metrics", __doc__)
    parser.add_argument("runs", nargs="+", help="run directories")
    parser.add_argument("--out", required=True, help="PNG file to write")
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    if os.path.exists(args.out) and not args.overwrite:
        raise FileExistsError(f"{args.out} exists; pass --overwrite to replace it")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    for run in args.runs:
        rows = read_metrics(run)
        name = os.path.basename(os.path.normpath(run))
        steps = [int(r["step"]) for r in rows]
        axis.plot(steps, [float(r["loss"]) for r in rows], "--", label=f"{name} train")
        if rows and rows[0].get("val_loss"):
            axis.plot(steps, [float(r["val_loss"]) for r in rows], "-o", ms=3,
                      label=f"{name} validation")
    axis.set_xlabel("optimizer step")
    axis.set_ylabel("masked-LM loss (cross-entropy)")
    axis.grid(alpha=0.3)
    axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0.0)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    figure.savefig(args.out, dpi=120, bbox_inches="tight")  # the legend outside the axes
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

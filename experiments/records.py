"""Where a run's committed record lives, and the small file and plot helpers of the report.

Every run keeps a small record under `<results_dir>/records/`, the path of its run folder
under `<runs_dir>` (`records/<study>/<variant>/` of a pre-training run; `records/<study>/
<pretrain study>/<variant>/step_NNNNNNN/` of a fine-tuning job; `records/<study>/` of a
length study). Reports read these records and nothing else, so they regenerate in any
checkout. (`records`, not `runs`: `.gitignore` ignores every folder named `runs`.)
"""

import csv
import io
import json
import math
import os
import shlex
import statistics
import time

# The studies' writers and jsonl are the base package's (standard library only, so
# `experiments.stage` has them on a machine without Keras), used as `records.write_json` &c.:
# each file written whole or not at all (staged), each jsonl line appended whole.
from keras_tupe_base.jsonl import append_jsonl, read_jsonl  # noqa: F401
from keras_tupe_base.staging import write_json, write_text  # noqa: F401

PROGRAM = "python -m experiments.run"
# A pre-training run's settings and its record's (keras_tupe.pretraining.RUN_CONFIG; that
# module imports Keras, which a report does not need).
RUN_RECORD = "run_config.json"
METRIC_COLUMNS = ("step", "loss", "accuracy", "val_loss", "val_accuracy", "learning_rate",
                  "tokens_per_second", "elapsed_seconds")


def record_dir(config, *parts):
    """`<results_dir>/records/<study>/<parts...>`: a run's committed record folder."""
    return os.path.join(config["results_dir"], "records", config["study"], *parts)


def command_line(argv, program=PROGRAM):
    """The exact command a study output was produced with, as one shell line."""
    return f"{program} {shlex.join(argv)}".strip()


def machine():
    """The versions and the machine, as `run_config.json` of pre-training records them."""
    from keras_tupe.provenance import versions  # here: prepare and collect run without Keras

    return versions()


def now():
    return time.strftime("%Y-%m-%d %H:%M:%S %Z")


def read_metrics(folder):
    """`(rows, wall_seconds)` of the `metrics.csv` in `folder`; `([], 0.0)` when there is none.

    Rows are dicts of floats (`step` an int), one per step: a run killed after
    writing a row but before its backup repeats that block when resumed and logs
    the step again; the later row wins. `elapsed_seconds` restarts at 0 in every
    process that trained the run, so the wall time is the sum, over those
    processes, of the last `elapsed_seconds` each wrote (validation included,
    start-up and vocabulary training not).
    """
    path = os.path.join(folder, "metrics.csv")
    if not os.path.exists(path):
        return [], 0.0
    by_step = {}
    wall, segment, previous = 0.0, 0.0, -1.0
    for row in read_csv_rows(path):
        parsed = {key: _number(row.get(key)) for key in METRIC_COLUMNS}
        if parsed["step"] is None:
            continue
        parsed["step"] = int(parsed["step"])
        elapsed = parsed["elapsed_seconds"] or 0.0
        if elapsed < previous:  # a new process resumed the run
            wall += segment
        segment = previous = elapsed
        by_step[parsed["step"]] = parsed
    wall += max(segment, 0.0)
    return [by_step[step] for step in sorted(by_step)], wall


def _number(text):
    value = None if text in (None, "") else float(text)
    return None if value is None or math.isnan(value) else value


def read_csv_rows(path):
    """The rows of a CSV written by `write_csv` (its `# comment` lines skipped), as dicts."""
    with open(path, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def read_json(path, default=None):
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def median_tokens_per_second(rows):
    values = [r["tokens_per_second"] for r in rows if r.get("tokens_per_second")]
    return statistics.median(values) if values else None


def format_seconds(seconds):
    if seconds is None:
        return "–"
    minutes = seconds / 60
    if minutes < 1:
        return f"{seconds:.0f} s"
    if minutes < 60:
        return f"{minutes:.1f} min"
    hours, rest = divmod(round(minutes), 60)  # rounded first: 59.7 min is the next hour
    return f"{hours} h {rest:02d} min"


def write_csv(path, columns, rows, comments=()):
    """A CSV whose first lines are `# comment` lines (read it with `read_csv_rows`)."""
    buffer = io.StringIO(newline="")
    buffer.writelines(f"# {line}\n" for line in comments)
    writer = csv.DictWriter(buffer, fieldnames=list(columns), extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_value(row.get(k)) for k in columns})
    return write_text(path, buffer.getvalue())


def _csv_value(value):
    if value is None:
        return ""
    return f"{value:.6g}" if isinstance(value, float) else value


def beyond_seed_spread(diffs, spread):
    """Whether seed-by-seed differences decide a gap: every one has the same sign and their
    mean is larger than `spread` (the widest range across seeds of either side)."""
    return len({d > 0 for d in diffs}) == 1 and abs(statistics.fmean(diffs)) > spread


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure, path):
    """Saves and closes `figure`; the PNG carries no date, so a report drawn again from the
    same records is the same file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=130, bbox_inches="tight")
    pyplot().close(figure)
    return path


# 20 colours that are told apart at a glance (tab10, then tab20's lighter shades), and line
# styles and markers that change with them, so that no two of up to 20 lines look alike.
_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896",
            "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5")
_LINESTYLES = ("-", "--", "-.", ":")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def line_style(index):
    """`plot` keywords of the `index`-th line of a figure: colour, line style and marker.

    The first 10 lines get tab10's colours with solid lines, the next 10 lighter colours
    with dashed lines; markers cycle too, so lines stay apart in greyscale as well.
    """
    if not 0 <= index < len(_COLOURS):
        raise ValueError(f"A figure draws at most {len(_COLOURS)} lines with distinct styles. "
                         f"Received line {index}; split the figure.")
    return {"color": _COLOURS[index], "linestyle": _LINESTYLES[index // 10],
            "marker": _MARKERS[index % len(_MARKERS)]}


def legend_outside(axis_or_figure, handles=None, labels=None, fontsize=8):
    """A legend to the right of the axes, off the data (save with `bbox_inches="tight"`)."""
    args = () if handles is None else (handles, labels)
    return axis_or_figure.legend(*args, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                                 fontsize=fontsize, borderaxespad=0.0)

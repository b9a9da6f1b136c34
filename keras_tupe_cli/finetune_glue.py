"""Fine-tune a pre-trained keras_tupe encoder on GLUE with the papers' protocol.

    keras-tupe-finetune-glue --init runs/tupe_r_mini_enwiki \\
        --tasks cola mrpc rte stsb sst2 --data-dir ../shared/data --out runs/glue_tupe_r_mini

Defaults are the papers' (TUPE; Huang et al.): learning rates 2e-5 3e-5 4e-5 5e-5,
seeds 0-4, 10 epochs (5 for MNLI, QQP, QNLI), batch 32, warm-up ratio 0.06, linear
decay, AdamW (weight decay 0.01). For each task the median over seeds is taken per
learning rate and the best learning rate reported; `OUT/summary.md` and
`OUT/summary.csv` hold the table with the average, `OUT/results.jsonl` every run
(an interrupted protocol resumes from it). Without `--data-dir` (or for tasks it
lacks) the data come from tensorflow-datasets (online).
"""

import dataclasses
import os
import sys

# keras_tupe (with Keras: seconds) is imported inside the functions, after the flags parse.
from keras_tupe_cli.common import (INIT_FLAGS, add_init_flag, command_parser, entry_point, plumbing,
                                   positive_int)

# The papers' grid, the loaders and `FinetuneConfig`'s defaults, from the standard-library
# module of the fine-tuning configs: the flags parse, and --out is held, before Keras's
# seconds-long import.
CONFIGS = plumbing("finetuning_configs")
DEFAULTS = {field.name: field.default for field in dataclasses.fields(CONFIGS.FinetuneConfig)}
GRID_PRECISIONS = ("float32", "mixed_bfloat16")  # keras_tupe.grid.PRECISIONS (tested equal)


def parse_args(argv=None):
    p = add_init_flag(command_parser("keras-tupe-finetune-glue", __doc__))
    p.add_argument("--tasks", nargs="+", required=True, help="GLUE tasks, e.g. cola sst2 mrpc")
    p.add_argument("--out", required=True, help="results directory (resumed if it exists)")
    p.add_argument("--data-dir", help="folder with the glue_data TSV layout (or its parent)")
    p.add_argument("--vocab", help="vocabulary (default: the run directory's vocab.txt)")
    p.add_argument("--learning-rates", nargs="+", type=float,
                   default=list(CONFIGS.PAPER_LEARNING_RATES),
                   help="default: the papers' 2e-5 3e-5 4e-5 5e-5")
    p.add_argument("--seeds", nargs="+", type=int, default=list(CONFIGS.PAPER_SEEDS),
                   help="default: the papers' 0 1 2 3 4")
    p.add_argument("--selection-seed", type=int,
                   help="choose each task's learning rate with this seed (one of --seeds) "
                        "alone, then run the other seeds at the chosen rate only (default: "
                        "every rate runs every seed)")
    p.add_argument("--edge-learning-rates", nargs="+", type=float, default=[],
                   help="with --selection-seed: rates tried one at a time, nearest first, "
                        "while the chosen rate is the lowest / highest tried")
    p.add_argument("--epochs", type=int, help="default: 10, or 5 for MNLI, QQP, QNLI")
    p.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"])
    p.add_argument("--seq-len", type=int, default=DEFAULTS["seq_len"])
    p.add_argument("--warmup-ratio", type=float, default=DEFAULTS["warmup_ratio"])
    p.add_argument("--weight-decay", type=float, default=DEFAULTS["weight_decay"])
    p.add_argument("--dropout", type=float, default=DEFAULTS["dropout"])
    p.add_argument("--max-train-examples", type=int, help="use only the first N training examples")
    p.add_argument("--pad-to-longest", action="store_true",
                   help="pad each split only to its longest example (multiple of 8, at most "
                        "--seq-len): same outputs, faster on short-sentence tasks")
    p.add_argument("--pad-each-batch", action="store_true",
                   help="pad each batch only to its longest example (multiple of 16, at most "
                        "the split's length): same batches and outputs, less work on [PAD]")
    p.add_argument("--no-xla", dest="xla", action="store_false")
    p.add_argument("--steps-per-execution", type=positive_int, default=DEFAULTS["steps_per_execution"],
                   help="steps one call of the compiled train function runs (Keras fit's "
                        "argument): fewer Python round trips, the same numbers")
    p.add_argument("--save-models", action="store_true",
                   help="keep every fine-tuned classifier as the preset folder "
                        "OUT/models/<task>_lr<lr>_seed<seed>/ (TextClassifier.from_preset; "
                        "keras-tupe-export classifier)")
    p.add_argument("--data-loader", choices=CONFIGS.LOADERS,
                   help="feed the classifier's preprocessor through tf.data or Grain (default: "
                        "tf.data where TensorFlow imports, else Grain)")
    p.add_argument("--verbose", type=int, default=DEFAULTS["verbose"], choices=(0, 1, 2))
    p.add_argument("--grid", action="store_true",
                   help="JAX only: train each task's learning rates x seeds at once, in one "
                        "compiled program (keras_tupe.grid; docs/finetuning.md)")
    p.add_argument("--precision", choices=GRID_PRECISIONS,
                   help="with --grid: the members' dtype policy (default: float32)")
    p.add_argument("--steps-per-dispatch", type=positive_int,
                   help="with --grid: steps one call of the compiled program runs (default 100)")
    args = p.parse_args(argv)
    if not args.grid:
        given = [flag for flag, value in (("--precision", args.precision),
                                          ("--steps-per-dispatch", args.steps_per_dispatch))
                 if value is not None]
        if given:
            p.error(f"{' and '.join(given)} set how a grid trains: add --grid")
    elif os.environ.get("KERAS_BACKEND", "jax") != "jax":
        p.error(f"--grid trains on the JAX backend; KERAS_BACKEND is "
                f"{os.environ['KERAS_BACKEND']}. Valid: KERAS_BACKEND=jax")
    elif args.save_models:
        p.error("--grid keeps no classifier: drop --save-models, or --grid to keep them")
    elif args.pad_each_batch:
        p.error("--grid trains one length: drop --pad-each-batch (--pad-to-longest works)")
    if args.selection_seed is not None and args.selection_seed not in args.seeds:
        p.error(f"--selection-seed {args.selection_seed} is not one of --seeds "
                f"{' '.join(map(str, args.seeds))}: the chosen rate's score is their median")
    if args.edge_learning_rates and args.selection_seed is None:
        p.error("--edge-learning-rates widen the grid of a --selection-seed; without one, "
                "put them in --learning-rates")
    repeated = [rate for rate in args.edge_learning_rates
                if rate <= 0 or rate in args.learning_rates]
    if repeated:
        p.error(f"--edge-learning-rates {' '.join(f'{r:g}' for r in repeated)}: each must be a "
                "positive rate not already in --learning-rates")
    return args


def merge_repeats(flag, values):
    """`values` without repeats (first order kept), and a note naming each repeat, or None.

    `--tasks sst2 sst2` would run every sst2 run twice and count sst2 twice in the
    average; a task, learning rate or seed is one point of the grid however often it
    is listed.
    """
    unique = list(dict.fromkeys(values))
    if len(unique) == len(values):
        return unique, None
    def shown(value):
        return f"{value:g}" if isinstance(value, float) else str(value)

    counts = {value: values.count(value) for value in unique if values.count(value) > 1}
    named = ", ".join(shown(value) for value in counts)
    times = ", ".join(f"{n} times" for n in counts.values())
    return unique, (f"note: {flag} lists {named} more than once ({times}); each runs once: "
                    f"{flag} {' '.join(shown(value) for value in unique)}")


@entry_point(INIT_FLAGS)
def main(argv=None):
    args = vars(parse_args(argv))
    del args["tf_logs"], args["traceback"]
    tasks, init, out = args.pop("tasks"), args.pop("init"), args.pop("out")
    learning_rates, seeds = args.pop("learning_rates"), args.pop("seeds")
    for flag, values in (("--tasks", tasks), ("--learning-rates", learning_rates),
                         ("--seeds", seeds)):
        values[:], note = merge_repeats(flag, values)
        if note:
            print(note, file=sys.stderr, flush=True)
    if os.path.exists(out) and not os.path.isdir(out):  # else found after a first run (41 s)
        raise NotADirectoryError(f"--out {out} is a file; keras-tupe-finetune-glue writes a "
                                 "results folder there. Choose another --out.")
    # Held before Keras is imported: a second protocol on --out is refused at once.
    with plumbing("output_lock").output_lock(out):
        from keras_tupe.finetuning import Protocol, run_protocol

        protocol = Protocol(learning_rates, seeds, args.pop("selection_seed"),
                            args.pop("edge_learning_rates"))
        # Progress lines (steps, metrics, time left, evaluation) unless Keras's (--verbose).
        args["progress"] = args["verbose"] == 0
        args = {key: value for key, value in args.items()
                if value is not None or key not in ("precision", "steps_per_dispatch")}
        table = run_protocol(tasks, init, out, protocol=protocol, **args)
    for row in table:
        print(f"{row['task']}: {row['score']:.2f} (lr {row['best_learning_rate']:g}, "
              f"{row['seeds']} seeds)")
    print(f"table: {out}/summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Masked-LM pre-training of any keras_tupe preset with `model.fit`.

    keras-tupe-pretrain --preset tupe_r_mini \\
        --corpus ../shared/data/enwiki/train.txt --valid-corpus ../shared/data/enwiki/valid.txt \\
        --steps 2000 --batch-size 32 --seq-len 128 --out runs/tupe_r_mini

Defaults are TUPE's Table 1 (batch 256, sequence 512, peak LR 1e-4, 1% warm-up,
linear decay, AdamW β=(0.9, 0.999) ε=1e-6, weight decay 0.01, clip 1.0,
dropout 0.1, 15% masking 80/10/10). A killed run resumes when the same command
is run again. `--corpus` takes text files (one paragraph a line, blank line
between documents), WikiText `.tokens` files, directories of `.txt` files, or
`tfds:NAME[:SPLIT]` for tensorflow-datasets. `--shards DIR` instead takes the
token-id shards of `keras-tupe-shard-corpus`, read with NumPy only (a
JAX machine without TensorFlow can train from them).
"""

import argparse
import os
import sys

# keras_tupe (with Keras: seconds) is imported inside the functions, after the flags parse.
from keras_tupe_cli.common import command_parser, entry_point, fill_defaults, plumbing

# The choices of `keras_tupe.pretraining` (a test checks they agree): the parser knows them
# without importing keras_tupe, so a usage error comes before TensorFlow's seconds-long import.
STRATEGIES = ("default", "mirrored", "multiworker")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")


def pretrain_defaults():
    """`PretrainConfig`'s defaults (imported once the flags have parsed)."""
    from keras_tupe.pretraining import PretrainConfig

    return PretrainConfig(preset="", corpus=[], out="")


def _int_list(text):
    try:
        return [int(float(s)) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated step numbers, got {text!r}")


def parse_flags(argv=None):
    """The flags as given and their paths checked; imports no Keras (a fraction of a second)."""
    p = command_parser("keras-tupe-pretrain", __doc__)
    # Defaults left out (None) are `PretrainConfig`'s, filled in after parsing.
    p.add_argument("--preset", required=True, help="backbone preset, e.g. tupe_r_mini")
    p.add_argument("--corpus", nargs="+", help="training text (see above); or --shards")
    p.add_argument("--valid-corpus", nargs="+", help="validation text, logged every --eval-every")
    p.add_argument("--shards", help="token-id shard folder (keras-tupe-shard-corpus) "
                                    "instead of --corpus; its vocabulary is the run's")
    p.add_argument("--valid-shards", help="validation shard folder, with --shards")
    p.add_argument("--out", required=True, help="run directory (created; resumed if unfinished)")
    p.add_argument("--overwrite", action="store_true", help="delete an existing --out first")
    p.add_argument("--vocab", help="WordPiece vocabulary file; trained on --corpus if absent")
    p.add_argument("--vocabulary-size", type=int, help="largest number of tokens (default: 30522)")
    p.add_argument("--cased", dest="lowercase", action="store_false", help="keep case")
    p.add_argument("--vocab-lines", type=int, help="corpus lines used to train the vocabulary")
    p.add_argument("--steps", type=int, help="optimizer steps")
    p.add_argument("--batch-size", type=int, help="global batch size")
    p.add_argument("--seq-len", type=int,
                   help="default: 512, or the preset's position table when shorter")
    p.add_argument("--learning-rate", type=float, help="peak LR")
    for flag in ("warmup-ratio", "weight-decay", "adam-beta1", "adam-beta2", "adam-epsilon"):
        p.add_argument(f"--{flag}", type=float)
    p.add_argument("--clip-norm", type=float, help="global norm of the aggregated gradient")
    for flag in ("dropout", "mask-rate", "mask-token-rate", "random-token-rate"):
        p.add_argument(f"--{flag}", type=float)
    p.add_argument("--eval-every", type=int,
                   help="steps between validation, CSV rows and backups (default: 1000 "
                        "when it divides --steps, else about a tenth of --steps)")
    p.add_argument("--valid-batches", type=int)
    p.add_argument("--save-steps", type=_int_list,
                   help="steps at which to keep a checkpoint (a preset folder, RUN/checkpoints/"
                        "step_NNNNNNN/), e.g. 100000,300000; 0 keeps "
                        "the random initialization (a control for fine-tuning)")
    p.add_argument("--strategy", choices=STRATEGIES)
    p.add_argument("--precision", choices=PRECISIONS)
    p.add_argument("--no-xla", dest="xla", action="store_false", help="turn XLA off")
    p.add_argument("--steps-per-execution", type=int, default=1,
                   help="steps one call of the compiled train function runs (Keras fit's "
                        "argument): fewer Python round trips, the same numbers; a divisor "
                        "of --eval-every and of each --save-steps")
    p.add_argument("--seed", type=int)
    p.add_argument("--shuffle-buffer", type=int)
    p.add_argument("--max-lines", type=int, help="read at most this many corpus lines")
    p.add_argument("--verbose", type=int, choices=(0, 1, 2),
                   help="0: silent, 1: a progress bar of steps (default), 2: a line per block")
    args = p.parse_args(argv)
    check_paths(args)
    return args


def parse_args(argv=None):
    """The flags, with `PretrainConfig`'s defaults for those left out."""
    return with_defaults(parse_flags(argv))


def with_defaults(args):
    """`args` with `PretrainConfig`'s defaults filled in (this imports Keras: seconds)."""
    # seq_len, eval_every: fit_to_preset's; corpus: no default (`pretrain_defaults`' [] is a
    # placeholder; a --shards run has corpus None, as its resume check records it).
    return fill_defaults(args, pretrain_defaults(), [
        name for name in vars(args) if name not in ("seq_len", "eval_every", "corpus")])


# `keras_tupe.data.shards`' advice (that module imports Keras, so it is not imported here).
SHARDS_HINT = "Make it with `keras-tupe-shard-corpus --out DIR ...`."


def check_paths(args):
    """The checks of the paths given that need no TensorFlow.

    A path that does not exist, a shard folder that is a file and an `--out` that is a
    file; what is inside them is checked by `keras_tupe.pretraining.pretrain`.
    """
    for flag, paths in (("--corpus", args.corpus), ("--valid-corpus", args.valid_corpus),
                        ("--shards", [args.shards]), ("--valid-shards", [args.valid_shards]),
                        ("--vocab", [args.vocab])):
        hint = f" {SHARDS_HINT}" if flag.endswith("shards") else ""
        for path in paths or ():
            if path is None or path.startswith("tfds:"):
                continue
            if not os.path.exists(path):
                raise FileNotFoundError(f"{flag} {path} does not exist.{hint}")
            if hint and not os.path.isdir(path):
                raise NotADirectoryError(f"{flag} {path} is not a folder.{hint}")
    for flag, paths, when in (("--corpus", args.corpus, "for the vocabulary, then every epoch"),
                              ("--valid-corpus", args.valid_corpus, "at every validation")):
        plumbing("corpus_files").refuse_streams(
            paths, flag, f"keras-tupe-pretrain reads it several times ({when})")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise NotADirectoryError(f"--out {args.out} is a file; a run writes a folder.")


def fit_to_preset(args):
    """Fills the defaults left open: `--seq-len` and `--eval-every` that fit the run.

    `--seq-len`: the paper's 512, or the preset's position table when shorter (the
    `tiny` presets have 128); with `--shards`, the shards' length. `--eval-every`: the
    paper's 1000 when it divides `--steps`, else the largest divisor of `--steps` up to
    a tenth of it (30 for 300).
    """
    from keras_tupe.data.shards import ShardError, read_manifest
    from keras_tupe.models.presets import PRESETS

    defaults = pretrain_defaults()

    if args["seq_len"] is None and args.get("shards"):
        try:
            args["seq_len"] = read_manifest(args["shards"])["sequence_length"]
        except ShardError:
            pass  # `pretrain` reports the folder's problem
    if args["seq_len"] is None:
        table = PRESETS.get(args["preset"], {}).get("max_sequence_length", defaults.seq_len)
        args["seq_len"] = min(defaults.seq_len, table)
    steps = args["steps"]
    if args["eval_every"] is None:
        if steps >= 1 and steps % defaults.eval_every == 0:
            args["eval_every"] = defaults.eval_every
        else:
            args["eval_every"] = max([d for d in range(1, max(steps // 10, 1) + 1)
                                      if steps % d == 0] or [1])
    return args


def settings_line(config):
    """The effective settings, printed when the run starts."""
    return (f"pretrain {config.preset}: {config.steps} steps of batch {config.batch_size} x "
            f"sequence {config.seq_len}, validation and backup every {config.eval_every} steps, "
            f"peak LR {config.learning_rate:g}, {config.precision}, strategy {config.strategy}, "
            f"{'XLA' if config.xla else 'no XLA'} -> {config.out}")


def parse_config(argv=None):
    """The run's `PretrainConfig` from the command line, defaults fitted to the preset."""
    return run_config(parse_args(argv))


def run_config(args):
    """The `PretrainConfig` of parsed flags with their defaults, fitted to the preset."""
    args = fit_to_preset(vars(args))
    from keras_tupe.pretraining import PretrainConfig

    del args["tf_logs"], args["traceback"]  # the entry point's own flags, not the run's
    return PretrainConfig(**args)


@entry_point()
def main(argv=None):
    args = parse_flags(argv)
    # Held before Keras is imported: a second run on --out is refused at once.
    with plumbing("output_lock").output_lock(args.out):
        config = run_config(with_defaults(args))
        if config.verbose:
            print(settings_line(config), flush=True)
        from keras_tupe.pretraining import pretrain

        pretrain(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())

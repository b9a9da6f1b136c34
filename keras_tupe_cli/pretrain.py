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

import contextlib
import os
import sys

# keras_tupe (with Keras: seconds) is imported inside `main`, after the flags parse and check.
from keras_tupe_base import corpus_files
from keras_tupe_base.extras import keras_backend
from keras_tupe_base.output_lock import output_lock
from keras_tupe_base.presets import PRESETS
from keras_tupe_base.settings import PretrainConfig
from keras_tupe_base.shard_folders import ShardError, read_manifest
from keras_tupe_cli.common import add_settings, command_parser, entry_point, settings_from

# The defaults fitted to the run after parsing (`fit_to_preset`).
FITTED = ("seq_len", "eval_every")


def parser():
    """The command's parser and its {setting: flag}: a flag a `PretrainConfig` field."""
    p = command_parser("keras-tupe-pretrain", __doc__)
    return p, add_settings(p, PretrainConfig, defaults=dict.fromkeys(FITTED))


def parse_args(argv=None):
    """The flags as given, their paths checked; imports no Keras (a fraction of a second)."""
    args = parser()[0].parse_args(argv)
    check_paths(args)
    return args


def parse_config(argv=None):
    """The run's `PretrainConfig` from the command line: the paths and every value checked,
    the defaults fitted to the preset (`fit_to_preset`); imports no Keras."""
    p, flags = parser()
    args = p.parse_args(argv)
    check_paths(args)
    fit_to_preset(vars(args))
    return settings_from(args, PretrainConfig, flags)


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
        corpus_files.refuse_streams(
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
    if args["seq_len"] is None and args.get("shards"):
        try:
            args["seq_len"] = read_manifest(args["shards"])["sequence_length"]
        except ShardError:
            pass  # `pretrain` reports the folder's problem
    if args["seq_len"] is None:
        table = PRESETS.get(args["preset"], {}).get("max_sequence_length", PretrainConfig.seq_len)
        args["seq_len"] = min(PretrainConfig.seq_len, table)
    steps = args["steps"]
    if args["eval_every"] is None:
        if steps >= 1 and steps % PretrainConfig.eval_every == 0:
            args["eval_every"] = PretrainConfig.eval_every
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


def locks_early(config):
    """Whether this process takes `--out`'s lock before Keras imports: every run but a
    process of JAX's multiworker layout that is not, or may not be, process 0 (the one
    writer, which `pretrain` locks for once the processes joined)."""
    return (config.strategy != "multiworker" or keras_backend() != "jax"
            or config.process_id == 0)


@entry_point()
def main(argv=None):
    config = parse_config(argv)
    # Held before Keras is imported: a second run on --out is refused at once.
    with output_lock(config.out) if locks_early(config) else contextlib.nullcontext():
        if config.verbose and config.process_id in (None, 0):
            print(settings_line(config), flush=True)
        from keras_tupe.pretraining import pretrain

        pretrain(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())

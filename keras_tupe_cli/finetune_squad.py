"""Fine-tune a keras_tupe encoder on SQuAD v1.1 (span extraction); print official EM/F1.

Online (tensorflow-datasets `squad/v1.1`):
    keras-tupe-finetune-squad --init runs/huang_m4_mini --out runs/squad_m4

Offline, only the dev file exists: a deterministic article-level split of it into
train/eval, for small experiments only (clearly NOT the official split):
    keras-tupe-finetune-squad --init runs/huang_m4_mini \\
        --offline-split ../shared/data/squad/dev-v1.1.json --out runs/squad_m4
"""

import contextlib
import dataclasses
import json
import sys

# keras_tupe (with Keras: seconds) is imported inside the functions, after the flags parse.
from keras_tupe_cli.common import INIT_FLAGS, add_init_flag, command_parser, entry_point, plumbing

# `keras_tupe.finetuning.SquadConfig`'s fields (but init, xla, lowercase) and their types,
# listed here so the parser needs no keras_tupe import (a usage error comes before
# TensorFlow's import); a test checks the list against the dataclass.
FLAG_TYPES = {"out": str, "train": str, "eval": str, "offline_split": str,
              "eval_fraction": float, "split_seed": int, "learning_rate": float, "seed": int,
              "epochs": int, "batch_size": int, "seq_len": int, "doc_stride": int,
              "max_query_length": int, "warmup_ratio": float, "weight_decay": float,
              "vocab": str, "max_train_examples": int, "verbose": int, "data_loader": str,
              "save_dir": str, "steps_per_execution": int}
# The library names SquadConfig's fields (`seq_len=`); this command's messages, its flags.
FLAGS = {**INIT_FLAGS, **{name: "--" + name.replace("_", "-") for name in FLAG_TYPES}}


def parse_flags(argv=None):
    """The flags as given (None: `SquadConfig`'s default); imports no Keras."""
    p = add_init_flag(command_parser("keras-tupe-finetune-squad", __doc__))
    for name, kind in FLAG_TYPES.items():
        choices = ("tf.data", "grain") if name == "data_loader" else None
        p.add_argument("--" + name.replace("_", "-"), type=kind, choices=choices)
    p.add_argument("--no-xla", dest="xla", action="store_false")
    p.add_argument("--cased", dest="lowercase", action="store_false")
    return p.parse_args(argv)


def parse_args(argv=None):
    """The flags, with `SquadConfig`'s defaults for those left out."""
    return with_defaults(parse_flags(argv))


def with_defaults(args):
    """`args` with `SquadConfig`'s defaults filled in (this imports Keras: seconds)."""
    from keras_tupe.finetuning import SquadConfig

    defaults = SquadConfig(init="")
    for field in dataclasses.fields(SquadConfig):
        if getattr(args, field.name) is None:
            setattr(args, field.name, getattr(defaults, field.name))
    return args


@entry_point(FLAGS)
def main(argv=None):
    args = parse_flags(argv)
    # Held before Keras is imported: a second run on --out is refused at once.
    with plumbing("output_lock").output_lock(args.out) if args.out else contextlib.nullcontext():
        args = vars(with_defaults(args))
        del args["tf_logs"], args["traceback"]
        from keras_tupe.finetuning import SquadConfig, finetune_squad

        result = finetune_squad(SquadConfig(**args))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

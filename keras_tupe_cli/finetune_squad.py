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
from keras_tupe_cli.common import (INIT_FLAGS, add_init_flag, command_parser, entry_point, plumbing,
                                   positive_int)

# `SquadConfig`, from the standard-library module of the fine-tuning configs (a usage error
# comes before Keras's and TensorFlow's import). Its fields are the flags: a flag each,
# `--seq-len` for `seq_len`, but --init.
CONFIGS = plumbing("finetuning_configs")
SquadConfig = CONFIGS.SquadConfig
FIELDS = dataclasses.fields(SquadConfig)
# A bool field is a switch that turns its default around.
SWITCHES = {"xla": "--no-xla", "lowercase": "--cased"}
CHOICES = {"data_loader": CONFIGS.LOADERS}
COUNTS = {"steps_per_execution"}  # at least 1 (`positive_int`)
VALUE_FLAGS = {field.name: "--" + field.name.replace("_", "-") for field in FIELDS
               if field.name != "init" and field.type is not bool}
# The library names SquadConfig's fields (`seq_len=`); this command's messages, its flags.
FLAGS = {**INIT_FLAGS, **VALUE_FLAGS}


def parse_args(argv=None):
    """The flags, `SquadConfig`'s defaults for those left out; imports no Keras."""
    p = add_init_flag(command_parser("keras-tupe-finetune-squad", __doc__))
    for field in FIELDS:
        if field.name in VALUE_FLAGS:
            kind = positive_int if field.name in COUNTS else field.type
            p.add_argument(VALUE_FLAGS[field.name], type=kind, default=field.default,
                           choices=CHOICES.get(field.name))
        elif field.type is bool:
            p.add_argument(SWITCHES[field.name], dest=field.name,
                           action="store_false" if field.default else "store_true")
    return p.parse_args(argv)


@entry_point(FLAGS)
def main(argv=None):
    args = vars(parse_args(argv))
    del args["tf_logs"], args["traceback"]
    # Held before Keras is imported: a second run on --out is refused at once.
    out = args["out"]
    with plumbing("output_lock").output_lock(out) if out else contextlib.nullcontext():
        from keras_tupe.finetuning import finetune_squad

        result = finetune_squad(SquadConfig(**args))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

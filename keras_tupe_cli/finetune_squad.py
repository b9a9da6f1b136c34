"""Fine-tune a keras_tupe encoder on SQuAD v1.1 (span extraction); print official EM/F1.

Online (tensorflow-datasets `squad/v1.1`):
    keras-tupe-finetune-squad --init runs/huang_m4_mini --out runs/squad_m4

Offline, only the dev file exists: a deterministic article-level split of it into
train/eval, for small experiments only (clearly NOT the official split):
    keras-tupe-finetune-squad --init runs/huang_m4_mini \\
        --offline-split ../shared/data/squad/dev-v1.1.json --out runs/squad_m4
"""

import contextlib
import json
import sys

# keras_tupe (with Keras: seconds) is imported inside `main`, after the flags parse and check.
from keras_tupe_base.output_lock import output_lock
from keras_tupe_base.settings import SquadConfig
from keras_tupe_cli.common import (INIT_FLAGS, add_settings, command_parser, entry_point,
                                   setting_flags, settings_from)

# The library names SquadConfig's fields (`seq_len=`); this command's messages, its flags.
FLAGS = {**INIT_FLAGS, **setting_flags(SquadConfig)}


def parse_config(argv=None):
    """The run's `SquadConfig`: a flag a field, every value checked; imports no Keras."""
    p = command_parser("keras-tupe-finetune-squad", __doc__)
    flags = add_settings(p, SquadConfig)
    return settings_from(p.parse_args(argv), SquadConfig, flags)


@entry_point(FLAGS)
def main(argv=None):
    config = parse_config(argv)
    # Held before Keras is imported: a second run on --out is refused at once.
    with output_lock(config.out) if config.out else contextlib.nullcontext():
        from keras_tupe.finetuning import finetune_squad

        result = finetune_squad(config)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

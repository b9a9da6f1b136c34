"""Fine-tune a keras_tupe encoder on SQuAD v1.1 (span extraction); print official EM/F1.

Online (tensorflow-datasets `squad/v1.1`):
    python -m training.finetune_squad --init runs/huang_m4_mini --out runs/squad_m4

Offline, only the dev file exists: a deterministic article-level split of it into
train/eval, for small experiments only (clearly NOT the official split):
    python -m training.finetune_squad --init runs/huang_m4_mini \\
        --offline-split ../shared/data/squad/dev-v1.1.json --out runs/squad_m4
"""

import argparse
import dataclasses
import json
import sys

from keras_tupe.finetuning import SquadConfig, finetune_squad
from training.cli import add_common_flags, run


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m training.finetune_squad", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = SquadConfig(init="")
    for field in dataclasses.fields(SquadConfig):
        flag = "--" + field.name.replace("_", "-")
        default = getattr(defaults, field.name)
        if field.name == "init":
            p.add_argument(flag, required=True, help="pre-training run directory or .keras file")
        elif field.name == "xla":
            p.add_argument("--no-xla", dest="xla", action="store_false")
        elif field.name == "lowercase":
            p.add_argument("--cased", dest="lowercase", action="store_false")
        else:
            kind = type(default) if default is not None else (
                int if field.name in ("max_train_examples", "split_seed") else str)
            p.add_argument(flag, type=kind, default=default)
    add_common_flags(p)
    return p.parse_args(argv)


def main(argv=None):
    return run(_main, argv)


def _main(argv=None):
    args = vars(parse_args(argv))
    del args["tf_logs"], args["traceback"]
    result = finetune_squad(SquadConfig(**args))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m experiments.floors`: the majority-class floor of every GLUE task that a
fine-tuning study of `experiments/studies.json` names, computed once from the study's GLUE
dev sets (its `data_dir`) into `docs/results/records/majority_class.json`, the record the
fine-tuning tables read; `report` then needs the committed records alone. `finetune` adds the
floor of a task the record lacks (`experiments.finetune_study.record_floors`)."""

import argparse

from experiments import config as study_config
from experiments.finetune_study import record_floors


def main(argv=None):
    argparse.ArgumentParser(prog="python -m experiments.floors", description=__doc__).parse_args(
        argv)
    configs = [study_config.load_config(name) for name, entry in study_config.studies().items()]
    for path in record_floors([c for c in configs if c["kind"] == "finetune"]):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

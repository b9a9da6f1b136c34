"""Fine-tune a pre-trained keras_tupe encoder on GLUE with the papers' protocol.

    keras-tupe-finetune-glue --init runs/tupe_r_mini_enwiki \\
        --tasks cola mrpc rte stsb sst2 --data-dir ../shared/data --out runs/glue_tupe_r_mini

Defaults are the papers' (TUPE; Huang et al.): learning rates 2e-5 3e-5 4e-5 5e-5,
seeds 0-4, 10 epochs (5 for MNLI, QQP, QNLI), batch 32, warm-up ratio 0.06, linear
decay, AdamW (weight decay 0.01). For each task the median over seeds is taken per
learning rate and the best learning rate reported; `OUT/summary.md` and
`OUT/summary.csv` hold the table with the average, `OUT/results.jsonl` every run
(an interrupted protocol resumes from it). Without `--data-dir` (or for tasks it
lacks) the data come from tensorflow-datasets (online). Under JAX, `--coordinator`,
`--num-processes` and `--process-id` (or a cluster JAX detects) train across processes:
each run data-parallel over every process's devices (`--batch-size` the global batch),
or with `--grid` each grid's members spread over them; process 0 writes `--out`.
"""

import contextlib
import dataclasses
import os
import sys

# keras_tupe (with Keras: seconds) is imported inside `main`, after the flags parse and check.
from keras_tupe_base.checks import merge_repeats
from keras_tupe_base.extras import keras_backend
from keras_tupe_base.output_lock import output_lock
from keras_tupe_base.settings import LAYOUT_FIELDS, FinetuneConfig, ProtocolConfig
from keras_tupe_cli.common import (INIT_FLAGS, add_settings, command_parser, entry_point,
                                   setting_flags, settings_from)

# A run's learning rate and seed are the protocol's grid; its task, each of --tasks.
RUN_SKIP = ("task", "learning_rate", "seed")
FLAGS = {**INIT_FLAGS, **setting_flags(FinetuneConfig, RUN_SKIP),
         **setting_flags(ProtocolConfig, ("tasks", "out"))}


def parse_configs(argv=None):
    """The protocol's `ProtocolConfig` and the runs' `FinetuneConfig` (of the first task;
    each run sets its own task, rate and seed): a flag a field, every value checked;
    imports no Keras."""
    p = command_parser("keras-tupe-finetune-glue", __doc__)
    protocol_flags = add_settings(p, ProtocolConfig)
    run_flags = add_settings(p, FinetuneConfig, skip=RUN_SKIP)
    args = p.parse_args(argv)
    protocol = settings_from(args, ProtocolConfig, protocol_flags)
    run = settings_from(args, FinetuneConfig, run_flags, task=protocol.tasks[0])
    layout = [f"--{name.replace('_', '-')}" for name in LAYOUT_FIELDS
              if getattr(protocol, name) is not None]
    if (protocol.grid or layout) and keras_backend() != "jax":
        where = ("KERAS_BACKEND is" if os.environ.get("KERAS_BACKEND") else
                 "KERAS_BACKEND is unset, so Keras takes keras.json's backend,")
        what = ("--grid trains" if protocol.grid else
                f"{' '.join(layout)} train across processes")
        raise ValueError(f"{what} on the JAX backend; {where} {keras_backend()}. "
                         "Valid: KERAS_BACKEND=jax")
    if protocol.grid and run.pad_each_batch:
        raise ValueError("--grid trains one length: drop --pad-each-batch (--pad-to-longest "
                         "works)")
    return protocol, run


@entry_point(FLAGS)
def main(argv=None):
    protocol, run = parse_configs(argv)
    for flag, values in (("--tasks", protocol.tasks), ("--learning-rates", protocol.learning_rates),
                         ("--seeds", protocol.seeds)):
        values[:], note = merge_repeats(flag, values)
        if note:
            print(f"note: {note}", file=sys.stderr, flush=True)
    out = protocol.out
    if os.path.exists(out) and not os.path.isdir(out):  # else found after a first run (41 s)
        raise NotADirectoryError(f"--out {out} is a file; keras-tupe-finetune-glue writes a "
                                 "results folder there. Choose another --out.")
    # Across processes (a process layout given): process 0 alone writes --out. The
    # others, and a process whose id JAX's cluster detection gives, leave the lock to
    # `run_protocol`, which takes it in process 0 once the processes joined.
    across = any(getattr(protocol, name) is not None for name in LAYOUT_FIELDS)
    # Held before Keras is imported: a second protocol on --out is refused at once.
    with (output_lock(out) if not across or protocol.process_id == 0
          else contextlib.nullcontext()):
        if across:
            from keras_tupe.processes import join

            join(protocol)  # before any JAX computation
        from keras_tupe.finetuning import run_protocol

        # Progress lines (steps, metrics, time left, evaluation) unless Keras's (--verbose).
        table = run_protocol(protocol, dataclasses.replace(run, progress=run.verbose == 0))
    for row in table:
        print(f"{row['task']}: {row['score']:.2f} (lr {row['best_learning_rate']:g}, "
              f"{row['seeds']} seeds)")
    print(f"table: {out}/summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The reproduction studies of issue 7: each study a JSON config and one command.

    python -m experiments.run pretrain --config experiments/configs/pretrain.json
    python -m experiments.run report   --config experiments/configs/pretrain.json

`experiments/README.md` lists every command in the order to run them, with the
estimated times. Modules:

- `config`: loading and checking the study configs, the shared vocabulary, the
  exact `PretrainConfig` of every variant (the one place a run's settings come from).
- `pretrain_study`: trains every variant of a study, resumable; its report.
- `finetune_study`: the reduced GLUE protocol on the pre-trained checkpoints.
- `length_study`: masked-LM validation loss at longer sequences (Huang Table 4).
- `maps`: per-head positional correlations (TUPE Figure 5) and the T5 bias per bucket.
- `records`: the command line, machine, wall times and files every output carries.
- `run`: the command-line entry point.
"""

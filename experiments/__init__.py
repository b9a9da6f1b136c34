"""The reproduction studies: each study an entry of `studies.json` and one command.

    python -m experiments.run pretrain --study pretrain
    python -m experiments.run report

`experiments/README.md` lists the commands, the committed record of each run and how to
resume. Modules: `config` (the studies and the exact `PretrainConfig` of every
variant), `pretrain_study`, `finetune_study`, `length_study` (each runs its kind of study,
records it and reports it), `replicates` and `compare` (pages over several pre-training
studies), `maps` (positional maps), `records` (record folders, file and plot helpers),
`run` (the command line).
"""

"""The reproduction studies: each study an entry of `studies.json` and one command.

    python -m experiments.run pretrain --study pretrain
    python -m experiments.run report

`experiments/README.md` lists the commands, the committed record of each run and how to
resume. Modules: `config` (the studies and the exact `PretrainConfig` of every variant),
`run` (the command line and the runner: one loop a kind of study, each run recorded),
`length_study` (the length study's fixed batches and losses), `report` (every page of
`docs/results/` from the records, its prose in `templates/`), `floors` (the GLUE
majority-class floors), `maps` (positional maps), `records` (record folders, file and plot
helpers), `claims` (an alias), `stage` and `calibrate` (the GPU stages).
"""

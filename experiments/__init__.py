"""The reproduction studies: each study an entry of `studies.json` and one command.

    python -m experiments.run pretrain --study pretrain
    python -m experiments.run report

`experiments/README.md` lists the commands, the committed record of each run and how to
resume. In their natural order: `config` (the definitions: the studies and the exact
`PretrainConfig` of every variant), `plans` (what a fine-tuning or length study runs), `run`
(the command line and the runner: one loop a kind of study, each run recorded),
`length_study` (the length study's fixed batches and losses), `report` (every page of
`docs/results/` from the records: `report_pretraining`, `report_finetuning`,
`report_length`, sharing `pages`; the prose in `templates/`), `claims` (the numbers
`docs/results.md` quotes that no other page prints), `floors` (the GLUE majority-class
floors), `maps` (positional maps), `records` (record folders and files). The GPU window
tool that runs the studies' GPU stages is a package of its own beside them, `stage`
(`experiments/stage/README.md`).

Imports: the standard library, `keras_tupe_base` and each other's modules at the top of a
module (`tests/test_architecture.py` refuses a function-local import of a module that imports
the standard library alone); `keras_tupe`, Keras, keras-hub and matplotlib inside the
functions that use them: Keras takes seconds to import, a usage error or a study's error
comes before it, and `stage prepare` imports it only where a stage's data needs it.
"""

"""keras_tupe_base: what keras_tupe, its commands, the studies and the benchmarks share, of the
standard library alone (a rule `tests/test_architecture.py` holds).

`settings`: the run settings (`PretrainConfig`, `FinetuneConfig`, `SquadConfig`, their choices,
the papers' grid), whose fields are the commands' flags; `presets`: the named presets' table;
`checks`: the argument checks; `staging`: writes that leave the whole file or nothing;
`output_lock`: one writer per output folder; `command_line`: what every program runs in
(a quiet TensorFlow start, one-line errors, clean stops); `flops`: the model FLOPs of an
encoder's step; `files`, `folders`, `jsonl`, `progress`, `corpus_files`, `shard_folders`,
`extras`. A command imports them before Keras, so its usage errors take a fraction of a
second; `import keras_tupe_base` imports nothing else.
"""

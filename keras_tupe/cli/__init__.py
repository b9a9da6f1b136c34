"""The console scripts: `keras-tupe-<name>` runs `keras_tupe.cli.<name>.main`.

One module per command (`pretrain`, `finetune_glue`, `finetune_squad`, `export`, `predict`,
`convert`, `shard_corpus`, `presets`, `plot_metrics`, `demo`, `saved_model_cli`) and what
they share (`common`: the quiet TensorFlow start, one-line errors, `run`). Each parses its
flags before importing Keras or TensorFlow; `python -m training.<name>` runs the same code.
"""

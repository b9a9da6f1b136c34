"""The commands: `keras-tupe-<name>` runs `keras_tupe.cli.<name>.main` (so does `python -m
keras_tupe.cli.<name>`, and in a checkout `python -m training.<name>`).

One module per command (`pretrain`, `finetune_glue`, `finetune_squad`, `export`, `predict`,
`convert`, `shard_corpus`, `presets`, `plot_metrics`, `demo`, `saved_model_cli`) and what
they share (`common`). Importing the package prepares TensorFlow's quiet start without
importing it, so a command's usage errors come before the seconds TensorFlow takes (in a
command's process `import keras_tupe` defers the model family, see `keras_tupe/__init__.py`),
and makes Ctrl-C while the command is still importing one line, not a traceback.
"""

from keras_tupe.cli.common import one_line_interrupts, quiet_tensorflow

one_line_interrupts()  # first: the sooner Ctrl-C is one line, the better
quiet_tensorflow()

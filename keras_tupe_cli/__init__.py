"""The commands: `keras-tupe-<name>` runs `keras_tupe_cli.<name>.main` (so do `python -m
keras_tupe_cli.<name>` and, in a checkout, `python -m training.<name>`); what they share is
`common`. Importing the package prepares TensorFlow's quiet start without importing it, and
makes Ctrl-C while a command still imports one line, not a traceback (`quiet_start` of
`keras_tupe_base.command_line`, what every program here runs in).

The commands live here, beside `keras_tupe` rather than inside it, because `import
keras_tupe` imports Keras and registers the model family (as `import keras_hub` does): a
command reads its flags from a settings dataclass of `keras_tupe_base` (the standard library
alone), checks them, and imports the library after, inside its functions (those
function-local imports are the point of this package), so a usage error takes a fraction of
a second. No module here imports `keras_tupe` at its top.
"""

from keras_tupe_base.command_line import quiet_start

quiet_start()

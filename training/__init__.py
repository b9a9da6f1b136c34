"""Thin scripts: `python -m training.<name>` runs the command `keras_tupe.cli.<name>`, which
is also the console script `keras-tupe-<name>`; the code lives in `keras_tupe/cli/`.

Importing the package starts as a command does (`keras_tupe.cli`): TensorFlow's quiet start,
and Ctrl-C as one line.
"""

from keras_tupe.cli.common import one_line_interrupts, quiet_tensorflow

one_line_interrupts()  # first: the sooner Ctrl-C is one line, the better
quiet_tensorflow()

"""Entry points: `python -m training.<name>`, or the `keras-tupe-<name>` console scripts.

Importing the package prepares TensorFlow's quiet start (`training.cli`) without importing
it, so an entry point's usage errors come before the seconds TensorFlow takes; and makes
Ctrl-C while the entry point is still importing one line, not a traceback.
"""

from training.cli import one_line_interrupts, quiet_tensorflow

one_line_interrupts()  # first: the sooner Ctrl-C is one line, the better
quiet_tensorflow()

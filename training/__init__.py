"""Entry points: `python -m training.<name>`, or the `keras-tupe-<name>` console scripts.

Importing the package quiets TensorFlow's start-up noise first (`training.cli`).
"""

from training.cli import quiet_tensorflow

quiet_tensorflow()

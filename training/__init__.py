"""Thin scripts: `python -m training.<name>` runs the command `keras_tupe.cli.<name>` (the
console script `keras-tupe-<name>`); the code lives in `keras_tupe/cli/`.

Importing the package makes this process a command's: `import keras_tupe` then defers the
model family (and TensorFlow) to its first use, and `keras_tupe.cli` starts TensorFlow
quietly and makes Ctrl-C one line. The studies and the benchmarks import it first for that.
"""

RUNS_KERAS_TUPE_COMMANDS = True  # read by keras_tupe/__init__.py, imported next

import keras_tupe.cli  # noqa: E402,F401

"""`python -m benchmarks.encoders`: the sweep (parent), or one `--worker` / `--probe` process."""

import sys

import keras_tupe_cli  # noqa: F401  (first: TensorFlow starts quietly, Ctrl-C is one line)
from benchmarks.encoders.cli import main
from keras_tupe_cli.common import run

sys.exit(run(main))

"""`python -m benchmarks.encoders`: the sweep (parent), or one `--worker` / `--probe` process."""

import sys

import training  # noqa: F401  (first: keras_tupe defers its models, TensorFlow starts quietly)
from benchmarks.encoders.cli import main
from keras_tupe_cli.common import run

sys.exit(run(main))

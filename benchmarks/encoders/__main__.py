"""`python -m benchmarks.encoders`: the sweep (parent), or one `--worker` / `--probe` process."""

import sys

from benchmarks.encoders.cli import main

# training.cli's one-line errors, without the TensorFlow import of `training`'s quiet
# start (which sets the quiet log level and CUDA devices its workers inherit): the
# parent process imports no framework.
sys.modules["tensorflow"] = None  # quiet_tensorflow skips its import
from training.cli import run  # noqa: E402

del sys.modules["tensorflow"]
sys.exit(run(main))

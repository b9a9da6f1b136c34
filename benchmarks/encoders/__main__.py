"""`python -m benchmarks.encoders`: the sweep (parent), or one `--worker` / `--probe` process."""

import sys

from benchmarks.encoders.cli import main
from keras_tupe_base.command_line import quiet_start, run

quiet_start()  # before a worker imports its framework: TensorFlow quiet, Ctrl-C one line
sys.exit(run(main))

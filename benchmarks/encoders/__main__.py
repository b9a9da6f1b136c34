"""`python -m benchmarks.encoders`: the sweep (parent), or one `--worker` / `--probe` process."""

import sys

from benchmarks.encoders.cli import main

# keras_tupe.cli's one-line errors, without the TensorFlow import of its quiet start
# (which sets the quiet log level and CUDA devices its workers inherit): the parent
# process imports no framework (`training` first: keras_tupe then defers its models). An
# entry already there (None where TensorFlow is refused, as tests/no_tensorflow does) is
# put back.
absent = object()
before = sys.modules.get("tensorflow", absent)
sys.modules["tensorflow"] = None  # quiet_tensorflow skips its import
import training  # noqa: E402,F401
from keras_tupe.cli.common import run  # noqa: E402

if before is absent:
    del sys.modules["tensorflow"]
else:
    sys.modules["tensorflow"] = before
sys.exit(run(main))

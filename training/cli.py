"""`training.cli` is `keras_tupe.cli.common`, the entry points' shared plumbing, kept for the
studies that import it here; new code imports `keras_tupe.cli.common`."""

import sys

from keras_tupe.cli import common

sys.modules[__name__] = common

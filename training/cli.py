"""`training.cli` is `keras_tupe_cli.common` (the studies import it here; new code, there)."""
import sys

from keras_tupe_cli import common

sys.modules[__name__] = common

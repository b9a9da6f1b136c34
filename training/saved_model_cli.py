"""`python -m training.saved_model_cli` runs the command `keras_tupe.cli.saved_model_cli`."""

import sys

from keras_tupe.cli import saved_model_cli

if __name__ == "__main__":
    sys.exit(saved_model_cli.main())
else:  # imported: the command's module itself, so what a test patches here, the command uses
    sys.modules[__name__] = saved_model_cli

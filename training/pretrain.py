"""`python -m training.pretrain` runs the command `keras_tupe.cli.pretrain`."""

import sys

from keras_tupe.cli import pretrain

if __name__ == "__main__":
    sys.exit(pretrain.main())
else:  # imported: the command's module itself, so what a test patches here, the command uses
    sys.modules[__name__] = pretrain

"""`python -m training.convert` runs the command `keras_tupe.cli.convert`."""

import sys

from keras_tupe.cli import convert

if __name__ == "__main__":
    sys.exit(convert.main())
else:  # imported: the command's module itself, so what a test patches here, the command uses
    sys.modules[__name__] = convert

"""`python -m training.export` runs the command `keras_tupe.cli.export`."""

import sys

from keras_tupe.cli import export

if __name__ == "__main__":
    sys.exit(export.main())
else:  # imported: the command's module itself, so what a test patches here, the command uses
    sys.modules[__name__] = export

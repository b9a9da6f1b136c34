"""`python -m training.presets` runs the command `keras_tupe.cli.presets`."""

import sys

from keras_tupe.cli import presets

if __name__ == "__main__":
    sys.exit(presets.main())
else:  # imported: the command's module itself, so what a test patches here, the command uses
    sys.modules[__name__] = presets

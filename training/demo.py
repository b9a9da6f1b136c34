"""`python -m training.demo` runs the command `keras_tupe.cli.demo`."""

import sys

from keras_tupe.cli import demo

if __name__ == "__main__":
    sys.exit(demo.main())
else:  # imported: the command's module itself, so what a test patches here, the command uses
    sys.modules[__name__] = demo

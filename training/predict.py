"""`python -m training.predict` runs the command `keras_tupe.cli.predict`."""

import sys

from keras_tupe.cli import predict

if __name__ == "__main__":
    sys.exit(predict.main())
else:  # imported: the command's module itself, so what a test patches here, the command uses
    sys.modules[__name__] = predict

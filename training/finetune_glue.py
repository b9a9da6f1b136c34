"""`python -m training.finetune_glue` runs the command `keras_tupe.cli.finetune_glue`."""

import sys

from keras_tupe.cli import finetune_glue

if __name__ == "__main__":
    sys.exit(finetune_glue.main())
else:  # imported: the command's module itself, so what a test patches here, the command uses
    sys.modules[__name__] = finetune_glue

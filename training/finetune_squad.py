"""`python -m training.finetune_squad` runs the command `keras_tupe.cli.finetune_squad`."""

import sys

from keras_tupe.cli import finetune_squad

if __name__ == "__main__":
    sys.exit(finetune_squad.main())
else:  # imported: the command's module itself, so what a test patches here, the command uses
    sys.modules[__name__] = finetune_squad

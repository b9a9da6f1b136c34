"""`python -m training.shard_corpus` runs the command `keras_tupe.cli.shard_corpus`."""

import sys

from keras_tupe.cli import shard_corpus

if __name__ == "__main__":
    sys.exit(shard_corpus.main())
else:  # imported: the command's module itself, so what a test patches here, the command uses
    sys.modules[__name__] = shard_corpus

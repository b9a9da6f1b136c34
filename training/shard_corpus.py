"""`python -m training.shard_corpus` runs the command `keras_tupe_cli.shard_corpus`."""
from keras_tupe_cli.shard_corpus import main

if __name__ == "__main__":
    raise SystemExit(main())

"""`python -m training.shard_corpus` runs the command `keras_tupe_cli.shard_corpus`."""
from training import thin_script

thin_script(__name__, "shard_corpus")

"""`python -m training.pretrain` runs the command `keras_tupe_cli.pretrain`."""
from training import thin_script

thin_script(__name__, "pretrain")

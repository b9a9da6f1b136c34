"""`python -m training.finetune_squad` runs the command `keras_tupe_cli.finetune_squad`."""
from training import thin_script

thin_script(__name__, "finetune_squad")

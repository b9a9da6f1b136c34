"""`python -m training.finetune_glue` runs the command `keras_tupe_cli.finetune_glue`."""
from training import thin_script

thin_script(__name__, "finetune_glue")

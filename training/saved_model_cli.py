"""`python -m training.saved_model_cli` runs the command `keras_tupe_cli.saved_model_cli`."""
from training import thin_script

thin_script(__name__, "saved_model_cli")

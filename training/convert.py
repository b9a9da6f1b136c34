"""`python -m training.convert` runs the command `keras_tupe_cli.convert`."""
from training import thin_script

thin_script(__name__, "convert")

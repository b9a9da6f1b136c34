"""`python -m training.export` runs the command `keras_tupe_cli.export`."""
from training import thin_script

thin_script(__name__, "export")

"""`python -m training.predict` runs the command `keras_tupe_cli.predict`."""
from training import thin_script

thin_script(__name__, "predict")

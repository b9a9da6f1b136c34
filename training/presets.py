"""`python -m training.presets` runs the command `keras_tupe_cli.presets`."""
from training import thin_script

thin_script(__name__, "presets")

"""`python -m training.demo` runs the command `keras_tupe_cli.demo`."""
from training import thin_script

thin_script(__name__, "demo")

"""`python -m training.plot_metrics` runs the command `keras_tupe_cli.plot_metrics`."""
from training import thin_script

thin_script(__name__, "plot_metrics")

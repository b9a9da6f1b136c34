"""`python -m training.plot_metrics` runs the command `keras_tupe.cli.plot_metrics`."""

import sys

from keras_tupe.cli import plot_metrics

if __name__ == "__main__":
    sys.exit(plot_metrics.main())
else:  # imported: the command's module itself, so what a test patches here, the command uses
    sys.modules[__name__] = plot_metrics

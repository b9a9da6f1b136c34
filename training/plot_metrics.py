"""`python -m training.plot_metrics` runs the command `keras_tupe_cli.plot_metrics`."""
from keras_tupe_cli.plot_metrics import main

if __name__ == "__main__":
    raise SystemExit(main())

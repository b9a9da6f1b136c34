"""`python -m training.presets` runs the command `keras_tupe_cli.presets`."""
from keras_tupe_cli.presets import main

if __name__ == "__main__":
    raise SystemExit(main())

"""`python -m training.export` runs the command `keras_tupe_cli.export`."""
from keras_tupe_cli.export import main

if __name__ == "__main__":
    raise SystemExit(main())

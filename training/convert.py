"""`python -m training.convert` runs the command `keras_tupe_cli.convert`."""
from keras_tupe_cli.convert import main

if __name__ == "__main__":
    raise SystemExit(main())

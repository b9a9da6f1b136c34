"""`python -m training.demo` runs the command `keras_tupe_cli.demo`."""
from keras_tupe_cli.demo import main

if __name__ == "__main__":
    raise SystemExit(main())

"""`python -m training.predict` runs the command `keras_tupe_cli.predict`."""
from keras_tupe_cli.predict import main

if __name__ == "__main__":
    raise SystemExit(main())

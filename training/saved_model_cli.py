"""`python -m training.saved_model_cli` runs the command `keras_tupe_cli.saved_model_cli`."""
from keras_tupe_cli.saved_model_cli import main

if __name__ == "__main__":
    raise SystemExit(main())

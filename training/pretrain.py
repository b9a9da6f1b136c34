"""`python -m training.pretrain` runs the command `keras_tupe_cli.pretrain`."""
from keras_tupe_cli.pretrain import main

if __name__ == "__main__":
    raise SystemExit(main())

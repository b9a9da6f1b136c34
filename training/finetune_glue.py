"""`python -m training.finetune_glue` runs the command `keras_tupe_cli.finetune_glue`."""
from keras_tupe_cli.finetune_glue import main

if __name__ == "__main__":
    raise SystemExit(main())

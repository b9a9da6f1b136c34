"""`python -m training.finetune_squad` runs the command `keras_tupe_cli.finetune_squad`."""
from keras_tupe_cli.finetune_squad import main

if __name__ == "__main__":
    raise SystemExit(main())

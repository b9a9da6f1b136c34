"""`python -m keras_tupe.export.saved_model_cli`: the `keras-tupe-saved-model-cli` command
(`keras_tupe_cli.saved_model_cli`, TensorFlow's `saved_model_cli` with the tensorflow-text
ops registered, which `run` needs for the preprocessor and classifier SavedModels)."""

import sys

from keras_tupe_cli.saved_model_cli import main

if __name__ == "__main__":
    sys.exit(main())
